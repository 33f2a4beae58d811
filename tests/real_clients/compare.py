"""Compares what each real client observed with the expected observations (and so with each
other). A step a client cannot express is reported, not failed.

usage: compare.py EXPECTED.json CLIENT=OBSERVED.json…   exit 1 on any difference.
"""
import json
import sys

expected = json.load(open(sys.argv[1]))
clients = [a.split("=", 1) for a in sys.argv[2:]]
observed = {name: json.load(open(path)) for name, path in clients}
failed = False
names = [n for n, _ in clients]
print(f"{'step':<12}" + "".join(f"{n:<14}" for n in names))
for step, want in expected.items():
    row = f"{step:<12}"
    for name in names:
        got = observed[name].get(step)
        if isinstance(got, dict) and "unsupported" in got:
            row += f"{'n/a':<14}"
        elif got == want:
            row += f"{'same':<14}"
        else:
            row += f"{'DIFFERENT':<14}"
            failed = True
            print(f"  {name} / {step}:\n    expected {json.dumps(want)}\n    observed {json.dumps(got)}", file=sys.stderr)
    print(row)
for name in names:
    for step, got in observed[name].items():
        if isinstance(got, dict) and "unsupported" in got:
            print(f"n/a: {name} / {step}: {got['unsupported']}")
sys.exit(1 if failed else 0)
