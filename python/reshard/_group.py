"""The group commit options of a Receiver (docs/python.md, "Group
commit"), checked where they are given and set on the C parameters."""
from . import _lib, errors


def set_params(p, group, group_size, group_rank, group_timeout_s):
    """Sets the group fields of ReceiverParams `p`; returns the encoded
    name, which the caller keeps alive as long as `p`."""
    if group is None:
        if group_size is not None or group_rank is not None:
            raise errors.InvalidArgument(
                "receiver: group_size and group_rank need group=")
        return None
    if not isinstance(group, str) or not group:
        raise errors.InvalidArgument(
            f"receiver: group must be a non-empty name, not {group!r}")
    for name, value in (("group_size", group_size),
                        ("group_rank", group_rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise errors.InvalidArgument(
                f"receiver: group '{group}' needs {name}= (an int), "
                f"not {value!r}")
    if not 0 <= group_rank < group_size:
        raise errors.InvalidArgument(
            f"receiver: group '{group}': group_rank {group_rank} is not in "
            f"[0, {group_size})")
    name = _lib.enc(group)
    p.group = name
    p.group_size = group_size
    p.group_rank = group_rank
    p.group_timeout_s = float(group_timeout_s)
    return name
