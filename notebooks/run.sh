#!/usr/bin/env bash
# Executes every notebook in notebooks/ on a small `lachesis compare` run, top to bottom.
#
#   bash notebooks/run.sh target/debug/lachesis
#
# $1      the lachesis binary (release or debug)
# NB_VENV the virtual environment to create or reuse (default /tmp/lachesis-nb-venv)
# NB_OUT  where the compare output and the executed notebooks go (default target/notebooks)
#
# Exits non-zero if the install, the compare run or any notebook fails; ends with
# "notebooks: N passed, M failed".
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: $0 PATH/TO/lachesis" >&2
    exit 2
fi
BIN="$(realpath "$1")"
[[ -x "$BIN" ]] || { echo "notebooks: $1 is not an executable" >&2; exit 2; }

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"   # the compare's default trace path is relative to the repository root
VENV="${NB_VENV:-/tmp/lachesis-nb-venv}"
OUT="$(realpath -m "${NB_OUT:-target/notebooks}")"

start=$SECONDS
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV" || {
        echo "notebooks: 'python3 -m venv' failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r notebooks/requirements.txt
echo "notebooks: python packages ready in $VENV ($((SECONDS - start)) s)"

# The venv's tools and kernel spec first, whatever else is on PATH or in ~/.local/share/jupyter.
export PATH="$VENV/bin:$PATH"
export JUPYTER_PATH="$VENV/share/jupyter"
export JUPYTER_PLATFORM_DIRS=1
unset MPLBACKEND   # a non-interactive backend here would drop every plot from the executed notebooks

rm -rf "$OUT/compare" "$OUT/notebooks"
mkdir -p "$OUT/notebooks"
"$BIN" compare --windows 2 --window-jobs 60 --load 0.6,0.9 --threads 2 --resamples 200 \
    --out "$OUT/compare" > "$OUT/compare.log"
echo "notebooks: compare output in $OUT/compare"

export LACHESIS_COMPARE_DIR="$OUT/compare"
passed=0
failed=0
for nb in notebooks/*.ipynb; do
    if jupyter nbconvert --to notebook --execute \
        --ExecutePreprocessor.timeout=600 \
        --output-dir "$OUT/notebooks" "$nb" > "$OUT/notebooks/$(basename "$nb" .ipynb).log" 2>&1; then
        echo "notebooks: $nb ok"
        passed=$((passed + 1))
    else
        echo "notebooks: $nb FAILED:" >&2
        tail -n 40 "$OUT/notebooks/$(basename "$nb" .ipynb).log" >&2
        failed=$((failed + 1))
    fi
done

echo "notebooks: executed notebooks in $OUT/notebooks ($((SECONDS - start)) s)"
echo "notebooks: $passed passed, $failed failed"
[[ $failed -eq 0 && $passed -gt 0 ]]
