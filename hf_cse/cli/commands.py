"""The dispatcher behind ``python -m hf_cse COMMAND``: which module runs each command, and the accelerate configs
shipped with the package (``python -m hf_cse config NAME`` prints one's path)."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from .entry_points import MODULES, run_command

#: command -> (module whose ``main(argv, prog)`` runs it, after the checks of :mod:`.entry_points`; what it does)
COMMANDS = {
    "train": (MODULES["train"], "train an encoder with a contrastive method (hf-cse-train)"),
    "eval": (MODULES["eval"], "score models on SentEval / MTEB / your own pairs (hf-cse-eval)"),
    "export": (MODULES["export"], "export a checkpoint as a sentence-transformers model (hf-cse-export)"),
    "config": ("hf_cse.cli.commands", "print the path of a shipped accelerate config (list them without NAME)"),
}
ACCELERATE_CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "accelerate"


def accelerate_configs() -> dict[str, Path]:
    """The accelerate configs shipped with the package, by name (``fsdp``, ``multi_gpu``, ...)."""
    return {p.stem: p for p in sorted(ACCELERATE_CONFIGS.glob("*.yaml"))}


def print_config_path(argv: list[str]) -> int:
    configs = accelerate_configs()
    if not argv:
        print("\n".join(f"{name}\t{path}" for name, path in configs.items()))
        return 0
    if argv[0] not in configs:
        print(f"hf_cse config: error: no accelerate config {argv[0]!r}; shipped: {', '.join(configs)}",
              file=sys.stderr)
        return 2
    print(configs[argv[0]])
    return 0


def usage() -> str:
    lines = ["usage: python -m hf_cse COMMAND [flags]   (COMMAND --help for its flags)", "", "commands:"]
    return "\n".join(lines + [f"  {name:<8}{what}" for name, (_, what) in COMMANDS.items()])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:  # one line, the last printed: the closest command and the others
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        print(f"python -m hf_cse: error: unknown command {command!r}; {hint}commands: {', '.join(COMMANDS)} "
              "(python -m hf_cse --help).", file=sys.stderr)
        return 2
    if command == "config":
        return print_config_path(rest)
    prog = f"hf-cse-{command}"  # the same command as the console script, named alike
    sys.argv[0] = prog  # argparse names the program (usage, --help) after it
    return run_command(command, rest, prog=prog)
