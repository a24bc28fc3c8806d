"""The optional C extension of the proxy, `llmwatch.collectors.receivers.proxy.dataplane` (design record 0067).

A hatchling build hook (pyproject.toml, `[tool.hatch.build.targets.wheel.hooks.custom]`): when a
wheel is built, the extension is compiled with setuptools' `build_ext` (the hook's own build
dependency) from `native/dataplane.c` and llhttp (`native/llhttp`, vendored from the httptools
sdist). It is optional: without a C compiler, or if the compile fails, the hook says why in one
warning and the wheel is the pure-Python one it always was (the Python relay serves every call).
`LLMWATCH_NATIVE=0` skips it; `LLMWATCH_NATIVE=1` makes a failed compile fail the build (CI, images).

An editable install (`pip install -e .`) compiles it in place, beside the module it belongs to
(`collectors/llmwatch/collectors/receivers/proxy/`, which the editable install puts on sys.path);
after editing the C, rebuild it there with `python hatch_build.py`.

Hardened flags: -O2, -fstack-protector-strong, -D_FORTIFY_SOURCE=2 (tests/unit/test_native_build.py
checks that the built file carries both).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script (`python hatch_build.py`), where hatchling need not be installed
    BuildHookInterface = object  # type: ignore[assignment,misc]

ROOT = Path(__file__).resolve().parent
NAME = "llmwatch.collectors.receivers.proxy.dataplane"
PACKAGE_DIR = ROOT / "collectors" / "llmwatch" / "collectors" / "receivers" / "proxy"
WHEEL_DIR = "llmwatch/collectors/receivers/proxy"
# Last on the command line, so they win over the interpreter's own CFLAGS (which may say -O3, or
# define _FORTIFY_SOURCE differently: undefined first to avoid a redefinition warning).
FLAGS = ["-O2", "-fstack-protector-strong", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=2", "-fvisibility=hidden"]


def sources(main: Path | None = None) -> list[Path]:
    return [main or ROOT / "native" / "dataplane.c", *sorted((ROOT / "native" / "llhttp" / "src").glob("*.c"))]


def build_native(
    out_dir: Path, extra_flags: list[str] | None = None, main: Path | None = None
) -> tuple[Path | None, str]:
    """Compile the extension into `out_dir`: (its path, "") or (None, why it could not be built).
    `extra_flags` go after the hardened ones (bench/fuzz_dataplane.py builds it with sanitizers);
    `main` replaces native/dataplane.c (its ThreadSanitizer self-check builds one with a race put in).

    Never raises for a missing compiler or a failed compile: the extension is optional.
    """
    try:
        from setuptools import Distribution, Extension
        from setuptools.command.build_ext import build_ext
    except ImportError:
        return None, "setuptools is not installed"
    ext = Extension(
        NAME,
        sources=[str(p) for p in sources(main)],
        include_dirs=[str(ROOT / "native" / "llhttp" / "include")],
        extra_compile_args=FLAGS + (extra_flags or []),
        extra_link_args=[f for f in extra_flags or [] if f.startswith("-fsanitize")],
    )
    dist = Distribution({"name": "llmwatch-native", "ext_modules": [ext], "script_name": "hatch_build.py"})
    cmd = build_ext(dist)
    with tempfile.TemporaryDirectory(prefix="llmwatch-native-") as tmp:
        cmd.build_temp = str(Path(tmp) / "temp")
        cmd.build_lib = str(Path(tmp) / "lib")
        cmd.ensure_finalized()
        try:
            cmd.run()
        except Exception as exc:  # CompileError, a missing compiler (DistutilsExecError, OSError), ...
            return None, f"{type(exc).__name__}: {str(exc).strip()[-300:] or 'the C compiler failed'}"
        built = Path(cmd.get_ext_fullpath(NAME))
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / built.name
        # Replaced whole (a rename), never rewritten in place: a running process may have it mapped.
        staged = out_dir / f".{built.name}.{os.getpid()}.tmp"
        shutil.copyfile(built, staged)
        staged.chmod(0o755)
        os.replace(staged, target)
    return target, ""


class NativeBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        mode = os.environ.get("LLMWATCH_NATIVE", "auto")
        if self.target_name != "wheel" or mode == "0":
            return
        if version == "editable":
            built, why = build_native(PACKAGE_DIR)
        else:
            built, why = build_native(Path(self.root) / "build" / "native")
        if built is None:
            message = f"llmwatch: the proxy's C extension was not built ({why}); the Python relay serves every call"
            if mode == "1":
                raise RuntimeError(message + " (LLMWATCH_NATIVE=1 requires it)")
            self.app.display_warning(message)
            return
        if version != "editable":
            build_data["force_include"][str(built)] = f"{WHEEL_DIR}/{built.name}"
        # A wheel with a compiled module is tagged for this interpreter and platform.
        build_data["pure_python"] = False
        build_data["infer_tag"] = True


if __name__ == "__main__":
    path, why = build_native(PACKAGE_DIR)
    print(path or f"not built: {why}")
    sys.exit(0 if path else 1)
