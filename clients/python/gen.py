"""Generates the Python gRPC code for proto/snowmint/v1/snowmint.proto into
src/snowmint_client/_proto with grpcio-tools (pinned in pyproject.toml's dev extra).

    python gen.py          regenerate the committed files
    python gen.py --check  fail if the committed files differ from a fresh generation

protoc writes `from snowmint.v1 import snowmint_pb2` into the gRPC module, an import of a
top-level `snowmint` package that does not exist here; it is rewritten to a relative import.
"""

from __future__ import annotations

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
PROTO = "snowmint/v1/snowmint.proto"
TARGET = HERE / "src" / "snowmint_client" / "_proto"
INIT = '"""Code generated from proto/snowmint/v1/snowmint.proto by clients/python/gen.py. DO NOT EDIT."""\n'


def generate(out: Path) -> None:
    include = Path(protoc.__file__).resolve().parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        PROTO,
    ]
    if protoc.main(args) != 0:
        sys.exit(f"gen.py: protoc failed on {PROTO}")
    generated = out / "snowmint" / "v1"
    grpc_module = generated / "snowmint_pb2_grpc.py"
    text = grpc_module.read_text()
    absolute = "from snowmint.v1 import snowmint_pb2 as"
    if absolute not in text:
        sys.exit(f"gen.py: {grpc_module.name} no longer imports {absolute!r}; update gen.py")
    grpc_module.write_text(text.replace(absolute, "from . import snowmint_pb2 as"))
    (generated / "__init__.py").write_text(INIT)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        fresh = out / "snowmint" / "v1"
        if sys.argv[1:] == ["--check"]:
            names = sorted(p.name for p in fresh.iterdir())
            committed = sorted(p.name for p in TARGET.iterdir() if p.name != "__pycache__") if TARGET.is_dir() else []
            _, mismatch, errors = filecmp.cmpfiles(fresh, TARGET, names, shallow=False)
            differ = sorted(set(mismatch + errors) | (set(names) ^ set(committed)))
            if differ:
                sys.exit(
                    f"gen.py: {TARGET.relative_to(HERE)} is not what {PROTO} generates "
                    f"({', '.join(differ)} differ); run: python gen.py"
                )
        elif sys.argv[1:]:
            sys.exit(__doc__)
        else:
            shutil.rmtree(TARGET, ignore_errors=True)
            shutil.copytree(fresh, TARGET)


if __name__ == "__main__":
    main()
