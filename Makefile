# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Installs go through uv (pinned, bootstrapped into the venv by pip); the pinned requirements*.txt stay the source of truth.
UV_VERSION := 0.13.9
UV_STAMP := $(VENV)/.uv-$(UV_VERSION)
PORT ?= 8501

.PHONY: install run test lint bench clean

# uv reads no pip configuration. This runs `uv ARGS...` with the index, extra indexes, find-links, constraints,
# trusted hosts, CA bundle and timeout that pip is configured with here (pip.conf files and PIP_* variables), and pip's
# rule that every index is searched for the best match, so both installers see the same packages.
define UV_WITH_PIP_CONFIG
import ast, os, shlex, subprocess, sys
listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
rank = {"global": 0, "install": 1, ":env:": 2}
config = {}
for line in listed.splitlines():
    key, sep, value = line.partition("=")
    section, _, name = key.partition(".")
    if sep and section in rank and rank[section] >= config.get(name, (-1, ""))[0]:
        config[name] = (rank[section], str(ast.literal_eval(value)))
get = lambda name: config.get(name, (0, ""))[1]
env = dict(os.environ)
if get("cert"):
    env["SSL_CERT_FILE"] = get("cert")
if get("timeout") or get("default-timeout"):
    env.setdefault("UV_HTTP_TIMEOUT", get("timeout") or get("default-timeout"))
args = sys.argv[1:] + ["--index-strategy", "unsafe-best-match"]
if get("no-index").lower() in ("1", "true", "yes", "on"):
    args.append("--no-index")
for name, flag in [("index-url", "--index-url"), ("extra-index-url", "--extra-index-url"),
                   ("find-links", "--find-links"), ("constraint", "--constraint"),
                   ("trusted-host", "--allow-insecure-host")]:
    for value in get(name).split():
        args += [flag, value]
print("+", shlex.join(args), flush=True)
os.execvpe(args[0], args, env)
endef
export UV_WITH_PIP_CONFIG

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(UV_STAMP): $(BIN)/python
	$(BIN)/pip install --disable-pip-version-check uv==$(UV_VERSION)
	touch $(UV_STAMP)

# --compile-bytecode: uv writes no .pyc files by default, so with PYTHONDONTWRITEBYTECODE set (as in CI and containers)
# every process compiled its imports again (about a fifth of a DDXPlus run's start).
$(STAMP): $(UV_STAMP) requirements.txt requirements-dev.txt
	@$(BIN)/python -c "$$UV_WITH_PIP_CONFIG" $(BIN)/uv pip install --compile-bytecode --python $(BIN)/python \
		-r requirements-dev.txt
	# The ICD-9 mapper's vocabulary, built once here so the first mapping reads a file (medeval_core/vocabularies/icd9_vocabulary.py)
	$(BIN)/python -m medeval_core.vocabularies.icd9_vocabulary
	# The sentence encoder's ONNX graph, exported once from the installed weights, so a query loads no torch (medeval_core/models/embeddings.py)
	$(BIN)/python -m medeval_core.models.embeddings
	# medeval's own modules compiled too (they are not installed into the venv): a command would otherwise compile
	# its imports on every start where PYTHONDONTWRITEBYTECODE is set; an edited module is recompiled as it is read.
	$(BIN)/python -m compileall -q medeval_core pages app.py
	touch $(STAMP)

install: $(STAMP)

# `serve` is `streamlit run app.py` with Streamlit's legacy pages/-folder mode off, so deep links open in the app shell.
run: $(STAMP)
	$(BIN)/python -m medeval_core serve --server.address 127.0.0.1 --server.port $(PORT) --server.headless true \
		--browser.gatherUsageStats false

# Lint first and the tests last, so that pytest's summary is the closing line.
test: lint
	$(BIN)/python -m pytest

# ruff and mypy as configured in pyproject.toml; both run, and it fails if either finds something.
lint: $(STAMP)
	@status=0; $(BIN)/ruff check . || status=1; $(BIN)/mypy || status=1; exit $$status

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache tests/artifacts
