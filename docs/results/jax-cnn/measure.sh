#!/bin/bash
# The example JAX CNN (examples/jax_cnn.py) on Fashion-MNIST, and what the parameter-server path costs it.
#   bash docs/results/jax-cnn/measure.sh OUT        (needs the [jax] extra and Debian's dataset-fashion-mnist)
# 1. BSP, 4 workers, 6 epochs: test accuracy, test loss, training and end-to-end time (OUT/cnn.json);
# 2. examples/jax_overhead.py --steps 50: JAX alone, through JaxModel, the push's vector work (OUT/overhead.txt);
# 3. one worker, 300 steps: time blocked in the exchange per step against compute (OUT/e2e.json).
set -euo pipefail
out=$1
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
model=(--data fashion-mnist --model py:examples/jax_cnn.py:make_model --input-shape 1,28,28)
t0=$(date +%s.%N)
"$py" -m mpikanel.run -n 5 -- python -m mpikanel.train "${model[@]}" --lr 0.05 --epochs 6 --quiet \
  --summary-json "$out/cnn.json"
t1=$(date +%s.%N)
"$py" examples/jax_overhead.py --steps 50 | tee "$out/overhead.txt"
"$py" -m mpikanel.run -n 2 -- python -m mpikanel.train "${model[@]}" --lr 0.05 --max-steps 300 --quiet \
  --summary-json "$out/e2e.json"
"$py" - "$out" "$t0" "$t1" > "$out/results.md" <<'PY'
import json, sys
out, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
cnn, e2e = (json.load(open(f"{out}/{n}.json")) for n in ("cnn", "e2e"))
w = e2e["per_worker"][0]
print("| run | figure |\n|---|---|")
print(f"| CNN, BSP, 4 workers, 6 epochs | test accuracy {cnn['test_accuracy']:.4f}, test loss {cnn['test_loss']:.3f}, "
      f"train accuracy {cnn['train_accuracy']:.3f}; {cnn['wall_s']:.1f} s training, {t1 - t0:.0f} s end to end; "
      f"{sum(x['pushes'] for x in cnn['per_worker'])} pushes of {cnn.get('bytes_per_push', 0) / 1e3:.0f} kB |")
print(f"| one worker, {w['steps']} steps | blocked in the exchange {1e3 * w['comm_s'] / w['steps']:.2f} ms/step, "
      f"compute {1e3 * w['compute_s'] / w['steps']:.1f} ms/step ({w['comm_s'] / w['compute_s']:.1%}) |")
print()
print("`examples/jax_overhead.py --steps 50`:\n\n```\n" + open(f"{out}/overhead.txt").read().strip() + "\n```")
PY
cat "$out/results.md"
