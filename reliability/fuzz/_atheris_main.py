"""One atheris (libFuzzer) run of one target, in its own process.

``python -m reliability.fuzz._atheris_main TARGET CTX FINDINGS -- <libFuzzer flags> CORPUS``

The target's modules are imported inside ``atheris.instrument_imports`` so libFuzzer sees
their coverage; every outgoing connection is refused for the whole run. Findings are kept
(not fatal) so one run reaches its execution count; the campaign reads them from FINDINGS.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def _import_all(packages: tuple[str, ...]) -> None:
    for name in packages:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            if ".cli" in info.name or "._cli" in info.name or info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
            except ImportError:
                continue


def main(argv: list[str]) -> None:
    import atheris

    from reliability.fuzz.harness import Judge, no_network, resolve
    from reliability.fuzz.targets import TARGETS

    name, ctx, findings = argv[1], Path(argv[2]), Path(argv[3])
    libfuzzer = argv[argv.index("--") + 1 :]
    target = TARGETS[name]
    packages = ("modelward.attest", *(p for p in target.instrument if p != "modelward"))
    with atheris.instrument_imports(include=list(target.instrument)):
        _import_all(packages)
        run = target.build(ctx)
    documented = tuple(resolve(d) for d in target.documented)
    judge = Judge(name, run, documented, findings_dir=findings)

    def one(data: bytes) -> None:
        judge(data)

    atheris.Setup([argv[0], *libfuzzer], one)
    with no_network():
        atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
