"""`socratic family ...`: render kernels of the family and inspect its knob space."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernels.attention.family.render import render
from kernels.attention.family.space import KNOB_SPACE, LAYERS, KnobError, neighbours, parse_knobs


def cmd_render(args: argparse.Namespace) -> int:
    try:
        knobs = parse_knobs(args.knobs or "")
        text = render(knobs)
    except KnobError as exc:
        print(f"socratic family render: {exc}", file=sys.stderr)
        return 2
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out} ({knobs.slug()})", file=sys.stderr)
    return 0


def cmd_space(args: argparse.Namespace) -> int:
    if args.json:
        json.dump({layer: {k: list(v) for k, v in knobs.items()} for layer, knobs in KNOB_SPACE.items()},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for layer in LAYERS:
        print(f"{layer}:")
        for name, values in KNOB_SPACE[layer].items():
            print(f"  {name:<16} {' | '.join(str(v) for v in values)}")
    return 0


def cmd_neighbours(args: argparse.Namespace) -> int:
    try:
        knobs = parse_knobs(args.knobs or "")
        found = neighbours(knobs, args.layer)
    except KnobError as exc:
        print(f"socratic family neighbours: {exc}", file=sys.stderr)
        return 2
    base = knobs.to_dict()
    for n in found:
        diff = {k: v for k, v in n.to_dict().items() if base[k] != v}
        print(",".join(f"{k}={v}" for k, v in diff.items()))
    return 0


def add_family_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("family", help="the parameterized attention kernel family")
    fsub = p.add_subparsers(dest="family_command", required=True)

    r = fsub.add_parser("render", help="render one kernel file from a knob setting")
    r.add_argument("knobs", nargs="?", default="",
                   help="key=value,key=value (others keep their defaults), a JSON object, or a JSON file")
    r.add_argument("-o", "--output", help="where to write the .cu file (default: stdout)")
    r.set_defaults(func=cmd_render)

    s = fsub.add_parser("space", help="list the layers, knobs and values")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_space)

    n = fsub.add_parser("neighbours", help="valid settings one knob away, inside one layer")
    n.add_argument("layer", choices=LAYERS)
    n.add_argument("knobs", nargs="?", default="")
    n.set_defaults(func=cmd_neighbours)
