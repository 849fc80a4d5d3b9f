"""reshard: refit an inference model from trainer ranks with another
parallel layout, driving libreshard through ctypes."""
from .capture import Capture, capture
from .errors import (IncompleteRefit, InputError, InvalidArgument, NoMemory,
                     ReshardError, ReshardIOError, ReshardTimeout,
                     TransportError, UnsupportedReshard, VerifyError)
