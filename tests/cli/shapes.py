# Row-major shape arithmetic shared by the CLI tests' ground-truth checkers
# (plan_exec.py, run_data.py), which import it from their own folder.


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def row_major(shape):
    stride, acc = [], 1
    for s in reversed(shape):
        stride.insert(0, acc)
        acc *= s
    return stride
