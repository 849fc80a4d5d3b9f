"""One inference rank of an engine replica for test_group.py, run as its
own process: creates a Receiver in group `group`, stages version 1 and
applies it, then prints one JSON line with the outcome and the bytes of its
live parameters. `mode` picks the fault: "ok", "kill_after_stage" (SIGKILL
itself between stage and apply), "never_stage" (exits before staging),
"fail" / "exit" (the library's test hook: fails its install, or exits,
once every other rank applied)."""
import json
import os
import signal
import sys

import torch

import reshard
from test_receiver import CAPTURE


def main():
    cfg = json.loads(sys.argv[1])
    rank = cfg["rank"]
    params = {"p": torch.full((8, 4), -1.0),
              "q": torch.full((4, 8), -2.0, dtype=torch.bfloat16)}
    out = {"rank": rank, "ok": False, "error": None, "type": None}
    with reshard.Receiver(cfg["directory"], "m", json.dumps(CAPTURE), params,
                          backend=cfg["backend"], discover_timeout_s=20,
                          release_after=False, holder=f"group-rank{rank}",
                          group=cfg["group"], group_size=cfg["size"],
                          group_rank=rank,
                          group_timeout_s=cfg["timeout_s"]) as r:
        mode = cfg["mode"]
        if mode == "never_stage":
            sys.exit(0)
        staged = r.stage(1)
        if mode == "kill_after_stage":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode in ("fail", "exit"):
            os.environ["RESHARD_TEST_GROUP_FAULT"] = f"{mode}:{rank}"
        try:
            r.apply(staged)
            out["ok"] = True
        except reshard.ReshardError as e:
            out["error"] = str(e)
            out["type"] = type(e).__name__
    out["p"] = params["p"].view(torch.int32).flatten().tolist()
    out["q"] = params["q"].view(torch.int16).flatten().tolist()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
