# Two commands for a fresh machine (Python 3.11+ and make):
#   make run    create .venv, install the app, serve it on http://localhost:8501
#   make test   install the app and test tools, find a Chromium, run lint and the whole suite
#   (make quick: lint and the suite without browser or slow tests)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8501
# localhost: this computer only. HOST=0.0.0.0 serves everyone on your network (docs/serving.md).
HOST ?= localhost
PIP := $(BIN)/python -m pip install --disable-pip-version-check -q

.PHONY: run serve serve-stop proxy database test quick lint unit app e2e bench screenshots browser clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: requirements.txt requirements-nodeps.txt | $(BIN)/python
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -r requirements-nodeps.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(PIP) -r requirements-dev.txt
	touch $@

# ui/launch.py: `streamlit run`, plus a background warm-up of what every lab's first visit pays.
run: $(VENV)/.runtime
	$(BIN)/python -m ui.launch app.py --server.port $(PORT) --server.address $(HOST)

# A class server: REPLICAS app replicas behind nginx on PORT 8500 (deploy/serve.py; docs/serving.md).
# AUTH=path/to/htpasswd turns on basic auth. `make serve-stop` (another terminal) or Ctrl-C stops everything.
REPLICAS ?= 2
SERVE_PORT ?= 8500
serve: $(VENV)/.runtime proxy
	$(BIN)/python deploy/serve.py --replicas $(REPLICAS) --port $(SERVE_PORT) $(if $(AUTH),--auth $(AUTH))

serve-stop:
	$(BIN)/python deploy/serve.py --stop

PROXY_REQUIRED ?= 1
test: PROXY_REQUIRED = 0
# nginx the way `browser` finds Chromium: Debian's package when present, installed with apt-get as root.
proxy:
	@if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then \
		echo "proxy: $$(command -v nginx || echo /usr/sbin/nginx)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null; \
	else \
		echo "no nginx (Debian/Ubuntu: sudo apt-get install nginx-light): make serve needs it, its tests skip"; \
		exit $(PROXY_REQUIRED); \
	fi

# The progress store's PostgreSQL tests start a throwaway cluster from Debian's server binaries: installed here
# the way `browser` installs Chromium, without the package's own cluster (nothing is left running).
database:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "database: PostgreSQL $$(ls /usr/lib/postgresql 2>/dev/null | tail -1)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		mkdir -p /etc/postgresql-common && echo "create_main_cluster = false" >> /etc/postgresql-common/createcluster.conf; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	else \
		echo "no PostgreSQL (Debian/Ubuntu: sudo apt-get install postgresql): its tests skip"; \
	fi

# Browser tests use Debian's Chromium when present (Playwright cannot download one everywhere),
# install it when we are root on Debian, and otherwise let Playwright fetch its own.
browser: $(VENV)/.dev
	@if command -v chromium >/dev/null 2>&1 || [ -n "$$CHROMIUM_PATH" ]; then \
		echo "browser: $$(command -v chromium || echo $$CHROMIUM_PATH)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		$(BIN)/python -m playwright install chromium; \
	fi

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint browser proxy database
	$(BIN)/python -m pytest --durations=25

# The fast part of the suite (no browser, no process-starting or training-heavy files): a few minutes.
quick: lint
	$(BIN)/python -m pytest -m "not slow and not e2e"

unit: $(VENV)/.dev
	$(BIN)/python -m pytest tests/unit
app: $(VENV)/.dev
	$(BIN)/python -m pytest tests/app
e2e: browser
	$(BIN)/python -m pytest tests/e2e

# Screenshots of every lab in presentation mode at 1920x1080 (the README's picture and the docs), from the layout test.
screenshots: browser
	$(BIN)/python -m pytest -q tests/e2e/test_layout.py -k "presenting and 1080p"
	mkdir -p assets/screenshots
	cp artifacts/screenshots/*-presenting.png assets/screenshots/
	@ls assets/screenshots

bench: browser
	$(BIN)/python benchmarks/bench_pages.py
	$(BIN)/python benchmarks/bench_browser.py
	$(BIN)/python benchmarks/bench_reproducibility.py
	$(BIN)/python benchmarks/bench_serving.py
	$(BIN)/python benchmarks/bench_ddp.py
	$(BIN)/python benchmarks/bench_scale.py
	$(BIN)/python benchmarks/bench_drills.py
	$(BIN)/python benchmarks/bench_tensors.py
	$(BIN)/python benchmarks/bench_evidence.py
	$(BIN)/python benchmarks/bench_slowstep.py
	$(BIN)/python benchmarks/bench_progress.py
	$(BIN)/python benchmarks/bench_first_visit.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache .ruff_cache
