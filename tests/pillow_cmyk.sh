#!/usr/bin/env bash
# CMYK JPEG as Photoshop and Pillow write it (4 components, Adobe marker, inverted CMYK, no YCCK
# transform): Pillow writes the file and its own convert('RGB') / convert('L') of it; the doctest
# case "CMYK JPEG written by Pillow ..." (skipped in the normal run) decodes the file with Echelon
# and compares. Exits 77 (ctest: skipped) when no Python can import PIL (Debian: python3-pil).
# Use: tests/pillow_cmyk.sh path/to/echelon_tests
set -euo pipefail
tests=$1
python=""
for candidate in ${ECHELON_PYTHON:-} python3 /usr/bin/python3; do
  if "$candidate" -c 'import PIL' >/dev/null 2>&1; then python=$candidate; break; fi
done
[[ -n $python ]] || { echo "SKIP: no Python with PIL (Debian: python3-pil)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" - "$dir" <<'PY'
import math, sys
from PIL import Image
out = sys.argv[1]
w, h = 45, 31  # odd sizes: not a multiple of the MCU
rgb = Image.new("RGB", (w, h))
rgb.putdata([(int(128 + 100 * math.sin(0.2 * x + 0.1 * y)), (7 * x + 3 * y) % 256,
              255 - (5 * x * y) % 256) for y in range(h) for x in range(w)])
rgb.convert("CMYK").save(f"{out}/pillow_cmyk.jpg", quality=90)
with Image.open(f"{out}/pillow_cmyk.jpg") as im:
    assert im.mode == "CMYK", im.mode
    open(f"{out}/pillow_rgb.raw", "wb").write(im.convert("RGB").tobytes())
    open(f"{out}/pillow_gray.raw", "wb").write(im.convert("L").tobytes())
PY
ECHELON_PILLOW_CMYK_DIR=$dir "$tests" --no-skip --test-case='CMYK JPEG written by Pillow*'
