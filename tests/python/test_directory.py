"""Leases and releases between several receivers of one version, and the
directory's listings from Python: two receivers with the default settings
both install the version (each its own holder), a holder name another
receiver holds is refused naming it, a released version names who released
it, and versions, leases and abandon are reachable through
reshard.Directory. Both directories."""
import json

import pytest
import torch

import reshard
from test_receiver import CAPTURE, Trainers, _params, _truth


@pytest.fixture
def trainers(directory):
    with Trainers(directory, "cma", seed=3) as t:
        t.publish(2)
        yield t


def _receiver(directory, params, **kw):
    kw.setdefault("discover_timeout_s", 20)
    return reshard.Receiver(directory, "m", json.dumps(CAPTURE), params,
                            backend="cma", **kw)


def test_two_default_receivers_both_install(directory, trainers):
    """Two receivers built with the defaults (release_after=True, default
    holders) in one process both stage and apply version 2: the first
    one's release is refused by the second's lease, the second's ends the
    version."""
    pa, pb = _params(), _params()
    with _receiver(directory, pa) as a, _receiver(directory, pb) as b:
        sa, sb = a.stage(2), b.stage(2)
        ra = a.apply(sa)
        assert ra.release_status == "RS_ERR_INCOMPLETE", ra.release_msg
        assert "leased by 'receiver-0-" in ra.release_msg
        rb = b.apply(sb)
        assert rb.release_status == "RS_OK", rb.release_msg
    truth = _truth(*trainers.fulls())
    for n in truth:
        assert torch.equal(pa[n], truth[n]) and torch.equal(pb[n], truth[n])
    with reshard.Directory(directory) as d:
        assert [v.state for v in d.versions("m")] == ["RELEASED"]


def test_a_taken_holder_name_is_refused(directory, trainers):
    with _receiver(directory, _params(), holder="engine-rank0") as a, \
            _receiver(directory, _params(), holder="engine-rank0") as b:
        s = a.stage(2)
        with pytest.raises(reshard.InputError) as e:
            b.stage(2)
        assert "lease holder name 'engine-rank0' is taken" in e.value.message
        a.apply(s)


def test_a_released_version_names_who_released_it(directory, trainers):
    with _receiver(directory, _params(), holder="first-rank") as a:
        a.pull(2)
    with _receiver(directory, _params(), holder="late-rank") as b:
        with pytest.raises(reshard.IncompleteRefit) as e:
            b.stage(2)
    assert "was released by 'first-rank'" in e.value.message


def test_listings_and_abandon(directory, trainers):
    with reshard.Directory(directory) as d:
        (v,) = d.versions("m")
        assert (v.version, v.state, v.slots, v.published) == (2, "READY", 2, 2)
        assert d.leases("m", 2) == []
        with _receiver(directory, _params(), holder="h1",
                       release_after=False) as r:
            s = r.stage(2)
            (lease,) = d.leases("m", 2)
            assert lease.holder == "h1" and 0 < lease.left_s <= 60
            with pytest.raises(reshard.IncompleteRefit, match="'h1'"):
                d.release("m", 2)
            assert d.abandon("m", 2, by="coordinator") == 1
            with pytest.raises(reshard.VerifyError,
                               match="released by 'coordinator'"):
                r.apply(s)
        assert d.leases("m", 2) == []
        assert [v.state for v in d.versions("m")] == ["RELEASED"]
        with pytest.raises(reshard.InputError):
            d.leases("m", 9)
    assert reshard.abandon(directory, "m", 2) == 0


def test_stale_after_defaults_as_the_cli():
    import inspect
    sig = inspect.signature(reshard.Receiver.__init__)
    assert sig.parameters["stale_s"].default == 5.0


def test_group_options_are_checked(file_dir):
    with pytest.raises(reshard.InvalidArgument, match="group_size"):
        _receiver(file_dir, _params(), group="g")
    with pytest.raises(reshard.InvalidArgument, match="not in"):
        _receiver(file_dir, _params(), group="g", group_size=2, group_rank=2)
    with pytest.raises(reshard.InvalidArgument, match="need group="):
        _receiver(file_dir, _params(), group_size=2)
    with pytest.raises(reshard.InvalidArgument, match="group name"):
        _receiver(file_dir, _params(), group="bad name", group_size=2,
                  group_rank=0)
