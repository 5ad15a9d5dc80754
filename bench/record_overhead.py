"""What `stridelens record` costs a real training loop (issue 33: ≤ 1.10× after the first steps).

A small GPT-like model (token + position embeddings, 4 pre-norm blocks of causal multi-head
attention and an MLP, tied to a DataLoader over a TensorDataset, AdamW) trains on CPU, once as
`python train.py` and once as `stridelens record -- python train.py`, in fresh processes of the
same interpreter, alternating plain/recorded `--rounds` times. Each process times every step;
the ratio is of the median step after the warm-up steps (recorded / plain), from each round and
over all of them. Also printed: the losses of both (they must be equal), the size of the
recording and how many lines it holds.

    .venv/bin/python bench/record_overhead.py [--steps 120] [--warmup 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TRAIN = textwrap.dedent('''\
    import json
    import sys
    import time

    import torch
    from torch import nn
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset


    class CausalSelfAttention(nn.Module):
        def __init__(self, dim, heads, block):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.proj(y)


    class Block(nn.Module):
        def __init__(self, dim, heads, block):
            super().__init__()
            self.ln1 = nn.LayerNorm(dim)
            self.attn = CausalSelfAttention(dim, heads, block)
            self.ln2 = nn.LayerNorm(dim)
            self.fc = nn.Linear(dim, 4 * dim)
            self.out = nn.Linear(4 * dim, dim)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            h = F.gelu(self.fc(self.ln2(x)))
            x = x + self.out(h)
            return x


    class GPT(nn.Module):
        def __init__(self, vocab, dim, heads, layers, block):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(block, dim)
            self.blocks = nn.ModuleList(Block(dim, heads, block) for _ in range(layers))
            self.ln = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)

        def forward(self, idx, targets):
            B, T = idx.size()
            pos = torch.arange(T, device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln(x))
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss


    def main(steps):
        torch.manual_seed(0)
        torch.set_num_threads(int(sys.argv[2]))
        block, batch = 64, 16
        data = torch.randint(0, 256, (steps * batch, block + 1))
        loader = DataLoader(TensorDataset(data[:, :-1], data[:, 1:]), batch_size=batch, shuffle=True)
        model = GPT(256, 128, 4, 4, block)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        times, losses = [], []
        start = time.perf_counter()
        for xb, yb in loader:
            logits, loss = model(xb, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            now = time.perf_counter()
            times.append(now - start)
            start = now
        print(json.dumps({"times": times, "losses": losses}))


    main(int(sys.argv[1]))
    ''')


def _run(command: list[str], cwd: Path) -> dict:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stridelens-record-bench-") as work:
        folder = Path(work)
        (folder / "train.py").write_text(TRAIN, encoding="utf-8")
        facts = folder / "facts"
        program = [sys.executable, "train.py", str(args.steps), str(args.threads)]
        recorded_cmd = [sys.executable, "-m", "stridelens", "record", "--out", str(facts), "--", *program]
        ratios, plain_all, rec_all = [], [], []
        for round_ in range(args.rounds):
            plain = _run(program, folder)
            recorded = _run(recorded_cmd, folder)
            if plain["losses"] != recorded["losses"]:
                raise SystemExit("the losses differ with recording on: the recorder changed the program")
            p = statistics.median(plain["times"][args.warmup:])
            r = statistics.median(recorded["times"][args.warmup:])
            first_p, first_r = sum(plain["times"][:args.warmup]), sum(recorded["times"][:args.warmup])
            plain_all += plain["times"][args.warmup:]
            rec_all += recorded["times"][args.warmup:]
            ratios.append(r / p)
            print(f"round {round_ + 1}: median step {p * 1e3:.1f} ms plain, {r * 1e3:.1f} ms recorded: "
                  f"{r / p:.3f}x after {args.warmup} warm-up steps "
                  f"(the warm-up steps: {first_p:.2f} s plain, {first_r:.2f} s recorded, {first_r / first_p:.2f}x)")
        size = sum(p.stat().st_size for p in facts.glob("*.json"))
        doc = json.loads(next(facts.glob("*.json")).read_text(encoding="utf-8"))
        names = sum(len(v) for v in doc["lines"].values())
        print(f"losses equal with and without recording ({args.steps} steps, {args.threads} threads, "
              f"python {sys.version.split()[0]}, sys.settrace)")
        overall = statistics.median(rec_all) / statistics.median(plain_all)
        print(f"step-time ratio recorded/plain after warm-up: {overall:.3f}x over {args.rounds} rounds "
              f"(per round: {', '.join(f'{x:.3f}' for x in ratios)})")
        print(f"recording: {size:,} bytes, {len(doc['lines'])} lines, {names} (line, name) entries, "
              f"{doc['recordings']} recordings merged")


if __name__ == "__main__":
    main()
