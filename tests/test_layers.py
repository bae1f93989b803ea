"""The package's layers hold: a thin Lightning callback over the training side (monitor/), an analysis side
(trace/) that never imports Lightning, torch or the training side, and one vocabulary of trace words."""

import ast
import inspect
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "lightning_profkit")


def sources(folder=PACKAGE):
    for d, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                yield os.path.relpath(path, PACKAGE), ast.parse(open(path).read())


def imports(tree, top_level_only=False):
    """Modules a tree imports (with ``from x import y``: x, and x.y for each y)."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


def fresh(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_callback_imports_no_analysis_and_no_msgspec():
    loaded = fresh("import sys, lightning_profkit.callback\n"
                   "print(' '.join(m for m in sys.modules if m == 'msgspec' or m.startswith(('lightning_profkit.trace', "
                   "'lightning_profkit.cli'))) or 'none')")
    assert loaded == ["none"]


LIGHTNING = ("lightning", "pytorch_lightning")
OURS = ("monitor", "callback", "cli", "report")  # parts of this package; the rest are other packages
# what each part of the package may never import, at any depth of a module (functions included)
FORBIDDEN = {
    "callback": ("cli", "report"),
    "monitor": ("cli", "report", "callback", *LIGHTNING),
    "cli": ("monitor", "callback"),
    "report": ("monitor", "callback", "cli", "torch", *LIGHTNING),
    "trace": ("monitor", "callback", "cli", "report", "torch", *LIGHTNING),
    "shared": ("monitor", "callback", "cli", "report", *LIGHTNING),  # alerts, figures, store, capture_request...
}


def part(name):
    """The layer of a module, by its path in the package."""
    if name in ("callback.py", "lightning_glue.py"):
        return "callback"
    return name.split(os.sep)[0] if os.sep in name else "shared"


def banned(module, layer):
    for b in FORBIDDEN[layer]:
        full = f"lightning_profkit.{b}" if b in OURS else b
        if module == full or module.startswith(full + "."):
            return True
    return False


def test_every_import_of_every_module_keeps_to_its_layer():
    for name, tree in sources():
        if name == "__init__.py":
            continue  # the package's lazy PerformanceMonitor
        bad = [m for m in imports(tree) if banned(m, part(name))]
        assert not bad, (name, bad)


def test_the_fit_and_what_it_owns_load_no_lightning():
    loaded = fresh("import sys, lightning_profkit.monitor.fit\n"
                   "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')) or 'none')")
    assert loaded == ["none"]


def test_the_callback_is_glue_hooks_that_delegate():
    """PerformanceMonitor defines ``__init__``, Lightning's hooks, the checkpoint and copy methods, and at most three
    small helpers."""
    from lightning.pytorch import Callback

    from lightning_profkit import callback

    own = {name for name, value in vars(callback.PerformanceMonitor).items() if callable(value)}
    helpers = own - set(vars(Callback)) - {"__init__", "__getstate__"}
    assert len(helpers) <= 3, helpers
    assert all(len(inspect.getsource(getattr(callback.PerformanceMonitor, name)).splitlines()) <= 12 for name in helpers)


def ctypes_imports(tree):
    return [m for m in imports(tree) if m == "ctypes" or m.startswith("ctypes.")]


def test_no_module_imports_ctypes():
    """No C calls through ctypes: what they reach depends on the C library and the allocator (issue 64)."""
    found = {name: ctypes_imports(tree) for name, tree in sources() if ctypes_imports(tree)}
    assert not found, found


def test_the_ctypes_check_sees_each_way_of_importing_it():
    code = "import ctypes\ndef f():\n    from ctypes import CDLL\n    import ctypes.util as u\n"
    assert ctypes_imports(ast.parse(code)) == ["ctypes", "ctypes", "ctypes.CDLL", "ctypes.util"]


def test_the_layer_check_sees_an_import_inside_a_function():
    tree = ast.parse("def f():\n    from lightning_profkit.cli.text import fmt\n")
    assert "lightning_profkit.cli.text" in list(imports(tree))
    assert "lightning_profkit.cli.text" not in list(imports(tree, top_level_only=True))


def test_the_analysis_side_loads_neither_lightning_nor_torch_nor_the_training_side():
    readers = [name for side in ("trace", "report") for name, _ in sources(os.path.join(PACKAGE, side))]
    modules = ["lightning_profkit." + name[:-3].replace(os.sep, ".") for name in readers]
    loaded = fresh(f"import sys\nfor m in {modules!r}: __import__(m)\n"
                   "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('torch', 'lightning') "
                   "or m.startswith('lightning_profkit.monitor')) or 'none')")
    assert loaded == ["none"]


# the trace words that must be written once, in trace/vocabulary.py: the step marker and the DataLoader
# span names (anywhere in a string), and the event categories (as a whole string)
MARKERS = ("ProfilerStep#", "enumerate(DataLoader)#", "enumerate(DataPipe)#", ".__next__")
CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_runtime", "cuda_driver", "runtime",
              "cpu_op", "operator", "user_annotation", "gpu_user_annotation", "python", "Trace")


def test_trace_words_are_written_in_one_module():
    for name, tree in sources():
        if name == os.path.join("trace", "vocabulary.py"):
            continue
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and id(n) not in docstrings and (n.value in CATEGORIES or any(w in n.value for w in MARKERS))]
        assert not found, (name, found)


def test_every_folder_of_the_package_is_a_package():
    """``pip install .`` finds packages by their ``__init__.py``: a folder without one would not be installed."""
    for d, dirs, files in os.walk(PACKAGE):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        assert "__init__.py" in files, d


LONGEST_BODY = 40  # lines of a function's body, its docstring left out: a guide that holds (a class's methods and a
# constructor's arguments are not counted: a class split to meet a count became a layer that forwards)


def body_lengths():
    """(module, function) and the lines of its body, for every function of the package."""
    for name, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                body = node.body[1:] if ast.get_docstring(node) is not None else node.body
                yield (name.replace(os.sep, "/"), node.name), node.end_lineno - body[0].lineno + 1 if body else 0


def test_function_bodies_keep_to_forty_lines():
    over = {key: lines for key, lines in body_lengths() if lines > LONGEST_BODY}
    assert not over, over


def test_every_module_has_a_test_module_of_its_name():
    """``lightning_profkit/<part>/.../<name>.py`` is tested in ``tests/<part>/test_<name>.py`` (a top-level module in
    ``tests/``), or with real fits in ``tests/trainer/``; a command of ``profkit`` may be ``test_<name>_command.py``."""
    tests = os.path.join(ROOT, "tests")
    missing = []
    for name, _ in sources():
        base = os.path.basename(name)[:-3]
        if base == "__init__":
            continue
        part = name.split(os.sep)[0] if os.sep in name else ""
        homes = [os.path.join(tests, part, f"test_{base}.py"), os.path.join(tests, "trainer", f"test_{base}.py"),
                 os.path.join(tests, part, f"test_{base}_command.py")]
        if not any(map(os.path.isfile, homes)):
            missing.append(name)
    assert not missing, missing


# Reading a file goes through opener.py (a regular file, no link, a cap before any parse): the calls that open a path
# themselves, and where each may stand and why
OPENERS = {"open", "io.open", "os.open", "os.fdopen", "gzip.open", "bz2.open", "lzma.open", "tarfile.open",
           "zipfile.ZipFile", "json.load", "pq.read_schema", "pq.read_table", "pq.read_metadata", "pq.ParquetFile",
           "np.load", "np.fromfile", "EventAccumulator", "read_text", "read_bytes", "csv.reader", "csv.DictReader"}
MAY_OPEN = {
    ("opener.py", "os.open"): "the opener",
    ("opener.py", "os.fdopen"): "the opener",
    ("atomic_files.py", "os.open"): "creates a new file (O_EXCL | O_NOFOLLOW) to write: reads nothing",
    ("atomic_files.py", "os.fdopen"): "the file it created",
    ("machine.py", "os.open"): "/proc files of this process and its loader's workers",
    ("report/run_data.py", "csv.reader"): "over a file the opener opened",
    ("trace/event_table.py", "pq.read_schema"): "over a file the opener opened (open_table: its footer checked)",
}


def opens(tree):
    """The calls in ``tree`` that open or parse a path themselves, by the name they are called by."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    else f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
            if name in OPENERS or (isinstance(f, ast.Attribute) and f.attr in OPENERS):
                yield name


def test_every_file_is_read_through_the_one_opener():
    found = {(name.replace(os.sep, "/"), call) for name, tree in sources() for call in opens(tree)}
    assert found <= set(MAY_OPEN), found - set(MAY_OPEN)
    assert set(MAY_OPEN) <= found, set(MAY_OPEN) - found  # one no longer there: take it off the list


def test_the_opener_check_sees_each_way_of_opening():
    code = ("def f(p, pq, fs):\n    open(p)\n    json.load(fh)\n    pq.read_table(p)\n    Path(p).read_text()\n"
            "    EventAccumulator(p)\n    import io; io.open(p)\n")
    assert sorted(opens(ast.parse(code))) == sorted(["open", "json.load", "pq.read_table", "read_text",
                                                     "EventAccumulator", "io.open"])
