"""Granary's Python module for a driver that reads through it in-process:
the package from this repository (python/granary) and its extension from a
build tree (<build>/python/_granary*.so), loaded from their files and
registered in sys.modules, so that `import granary` finds them (also in a
process forked afterwards) without installing anything or editing sys.path."""
import importlib
import importlib.machinery
import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def import_granary(build_dir):
    """True when `import granary` works: as installed or on PYTHONPATH, else
    from the source tree and build_dir; False when the extension is not built
    (or not for this interpreter) or does not load."""
    try:
        importlib.import_module("granary")
        return True
    except ImportError:
        pass
    package = os.path.join(REPO, "python", "granary")
    ext = next((p for p in (os.path.join(build_dir, "python", "_granary" + s)
                            for s in importlib.machinery.EXTENSION_SUFFIXES)
                if os.path.exists(p)), None)
    if ext is None or not os.path.exists(os.path.join(package, "__init__.py")):
        return False
    try:
        _load("_granary", ext)
        _load("granary", os.path.join(package, "__init__.py"), [package])
    except ImportError:
        sys.modules.pop("_granary", None)
        sys.modules.pop("granary", None)
        return False
    return True


def _load(name, path, package_dirs=None):
    spec = importlib.util.spec_from_file_location(name, path,
                                                  submodule_search_locations=package_dirs)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
