#!/usr/bin/env bash
# Makes DejaVuSans-subset.ttf, the one font the plots use, so a machine without fonts (or
# fontconfig) still labels its plots. Source: DejaVu Sans 2.37 from Debian's
# fonts-dejavu-core; subset to printable ASCII and the few symbols the plots print
# (± · × γ λ μ − – …) with fontTools (`pip install fonttools`). License: LICENSE-DejaVu.
set -euo pipefail
cd "$(dirname "$0")"
pyftsubset "${1:-/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf}" \
  --unicodes=U+0020-007E,U+00B1,U+00B7,U+00D7,U+03B3,U+03BB,U+03BC,U+2212,U+2013,U+2026 \
  --no-hinting --desubroutinize --layout-features='' \
  --output-file=DejaVuSans-subset.ttf
