#!/usr/bin/env python3
"""A small PyTorch training job under blox (CPU or GPU).

An MLP learns a fixed random linear map from synthetic data. The job uses
``blox_client``: it checks its lease at every step, applies a new batch size
from the scheduler at a boundary, pushes ``loss`` and ``progress``, reports
its start-up (importing torch and initialising CUDA) through ``iterate``,
checkpoints model, optimiser and step atomically when its lease is revoked
(and every ``--checkpoint-every`` steps), resumes from there, and says when it
is done. Run it under a worker, e.g. with ``blox local``:

    [[job]]
    arrival_s = 0
    gpus = 1
    command = ["python3", "examples/python/train.py", "--steps", "2000"]
"""

import argparse
import sys
import time

import torch  # the expensive import is part of the start-up blox measures

import blox_client
import blox_client.torch as bt


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="training steps in all")
    p.add_argument("--batch-size", type=int, default=64, help="unless the scheduler sets one")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--step-sleep-s", type=float, default=0.0, help="slow each step down (tests)")
    args = p.parse_args()

    job = blox_client.Job.from_env()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    target = torch.randn(32, 8, device=device)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 8)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    batch = job.batch_size or args.batch_size

    start = 0
    state = bt.load(job, "state", map_location=device)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        print(f"train.py: resumed at step {start} on {device}", file=sys.stderr, flush=True)
    else:
        print(f"train.py: starting on {device} ({job.env.devices or 'no GPU'})", file=sys.stderr, flush=True)

    def checkpoint(step: int) -> None:
        bt.save(job, "state", {"model": model.state_dict(), "opt": opt.state_dict(), "step": step})

    step, loss = start, None
    it = job.iterate(range(start, args.steps))
    for step in it:
        b = job.new_batch_size()
        if b is not None:
            batch = b
            job.applied_batch_size(b)
            print(f"train.py: batch size {b} from step {step}", file=sys.stderr, flush=True)
        x = torch.randn(batch, 32, device=device)
        loss = torch.nn.functional.mse_loss(model(x), x @ target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.step_sleep_s > 0:
            time.sleep(args.step_sleep_s)
        done = step + 1
        if done % args.checkpoint_every == 0:
            checkpoint(done)
        if done % 10 == 0 or done == args.steps:
            job.push_metric("loss", loss.item())
            job.progress(done / args.steps)
        step = done
    checkpoint(step)
    job.progress(step / args.steps)
    if it.revoked:
        print(f"train.py: lease revoked; checkpointed at step {step}", file=sys.stderr, flush=True)
    elif step >= args.steps:
        job.finish()
        last = f", loss {loss.item():.4f}" if loss is not None else ""
        print(f"train.py: done{last}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
