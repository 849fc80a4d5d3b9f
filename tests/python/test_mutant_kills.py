"""Cases the mutation gate (tests/mutate) found untested in the Python
package: a box with a negative offset is refused by the layout itself
(before the library sees it), and a capture replayed into a parameter laid
out other than row-major (a transposed view) writes its values there."""
import pytest
import torch

import reshard
from reshard import layouts


def test_box_refuses_a_negative_offset():
    t = torch.zeros(2, 4)
    with pytest.raises(layouts.LayoutError, match=r"'w'.*\[-1, 1\) of dim 0"):
        layouts.box("w", t, (4, 4), (-1, 0))
    with pytest.raises(layouts.LayoutError, match=r"'w'.*\[0, 5\) of dim 1"):
        layouts.box("w", torch.zeros(2, 5), (4, 4), (0, 0))
    b = layouts.box("w", t, (4, 4), (2, 0))  # the last rows: inside
    assert b.offset == (2, 0)


def test_replay_into_a_transposed_parameter():
    full = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 0.5
    meta = torch.nn.Parameter(torch.empty((3, 4), device="meta"),
                              requires_grad=False)
    cap = reshard.capture(sources={"w": full}, params={"p": meta},
                          load=lambda ws: [meta.copy_(w) for _, w in ws])
    assert len(cap.copies) == 1
    storage = torch.full((4, 3), -1.0)
    p = storage.t()  # [3, 4], column-major
    assert not p.is_contiguous()
    cap.replay({"w": full}, {"p": p})
    assert torch.equal(p, full)
    assert torch.equal(storage, full.t())
