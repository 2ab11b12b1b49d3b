"""The seed writer of tools/make-fuzz-corpus.py and the seeds of the data set and image formats:
IDX, CIFAR-10, PNG, BMP and JPEG (the JPEG seeds need Pillow, Debian python3-pil)."""
import gzip
import os
import struct
import sys
import zlib
from io import BytesIO

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fuzz", "corpus")
SEP = b"\n--echelon-fuzz-part--\n"  # tests/fuzz/fuzz_common.h kSeparator

try:
    from PIL import Image
except ImportError:  # the JPEG seeds need Pillow
    Image = None


def write(target, name, data):
    folder = os.path.join(ROOT, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seed-" + name), "wb") as f:
        f.write(data)


def clear_seeds():
    for target in os.listdir(ROOT) if os.path.isdir(ROOT) else []:
        folder = os.path.join(ROOT, target)
        for name in os.listdir(folder):
            if name.startswith("seed-"):
                os.remove(os.path.join(folder, name))


def pixel(i, y, x, c=0):
    return (i * 37 + y * 11 + x * 7 + c * 53) % 256


# ---- IDX ---------------------------------------------------------------------------------------
def idx_images(n, h, w):
    body = bytes(pixel(i, y, x) for i in range(n) for y in range(h) for x in range(w))
    return struct.pack(">IIII", 0x803, n, h, w) + body


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def idx_seeds():
    images, labels = idx_images(3, 6, 5), idx_labels([0, 9, 4])
    write("idx", "raw", images + SEP + labels)
    write("idx", "gzip", gzip.compress(images, mtime=0) + SEP + gzip.compress(labels, mtime=0))
    # Multi-member gzip (cat a.gz b.gz, pigz): valid, must be inflated whole.
    half = len(images) // 2
    multi = gzip.compress(images[:half], mtime=0) + gzip.compress(images[half:], mtime=0)
    write("idx", "gzip-multimember", multi + SEP + labels)
    write("idx", "empty-set", idx_images(0, 4, 4) + SEP + idx_labels([]))
    # Malformed (issue 14): dims multiplying past int64, label out of range, truncations.
    write("idx", "dims-overflow",
          struct.pack(">IIII", 0x803, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF) + b"\0" * 16 + SEP + labels)
    write("idx", "dims-overflow-to-zero",
          struct.pack(">IIII", 0x803, 0x10000, 0x10000, 0x10000) + b"\0" * 16 + SEP + labels)
    # Found by fuzz_idx in CI: zero items of 2^32 x 2^32 pixels overflowed the tensor shape.
    write("idx", "empty-set-huge-items",
          struct.pack(">IIII", 0x803, 0, 0xFFFFFF7F, 0xA70000FF) + SEP + idx_labels([]))
    write("idx", "label-out-of-range", images + SEP + idx_labels([0, 200, 4]))
    write("idx", "count-mismatch", images + SEP + idx_labels([0, 1]))
    write("idx", "truncated-images", images[:-7] + SEP + labels)
    write("idx", "trailing-bytes", images + b"xyz" + SEP + labels)
    write("idx", "bad-magic", struct.pack(">I", 0x804) + images[4:] + SEP + labels)
    write("idx", "truncated-header", images[:10] + SEP + labels)
    write("idx", "gzip-truncated", gzip.compress(images, mtime=0)[:-9] + SEP + labels)
    write("idx", "gzip-corrupt", bytearray_flip(gzip.compress(images, mtime=0), 20) + SEP + labels)
    write("idx", "gzip-trailing-garbage", gzip.compress(images, mtime=0) + b"garbage!" + SEP + labels)
    write("idx", "labels-missing", images)
    # The options part (tests/fuzz/idx.cpp): split t10k / "test", *.gz names, load_dataset for eval.
    gz_i, gz_l = gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)
    write("idx", "opt-t10k", images + SEP + labels + SEP + b"\x01")
    write("idx", "opt-test-alias", images + SEP + labels + SEP + b"\x21")
    write("idx", "opt-gz-names", gz_i + SEP + gz_l + SEP + b"\x06")
    write("idx", "opt-gz-name-raw-content", images + SEP + labels + SEP + b"\x06")
    write("idx", "opt-eval-fashion", images + SEP + labels + SEP + b"\x08")
    write("idx", "opt-eval-mnist-limit", gz_i + SEP + labels + SEP + b"\x1a\x02")
    # Not square: the model zoo needs H == W, the error must name the folder.
    write("idx", "opt-eval-not-square", idx_images(2, 4, 3) + SEP + idx_labels([1, 2]) + SEP + b"\x08")
    write("idx", "opt-eval-bad-label", images + SEP + idx_labels([0, 10, 4]) + SEP + b"\x08\x01")


def bytearray_flip(data, at):
    b = bytearray(data)
    b[at % len(b)] ^= 0xFF
    return bytes(b)


# ---- CIFAR-10 ----------------------------------------------------------------------------------
def cifar_record(i, label):
    return bytes([label]) + bytes(pixel(i, y, x, c) for c in range(3) for y in range(32) for x in range(32))


def cifar_seeds():
    write("cifar10", "one-record", cifar_record(0, 3))
    write("cifar10", "two-files", cifar_record(0, 0) + SEP + cifar_record(1, 9))
    write("cifar10", "label-out-of-range", cifar_record(0, 10))
    write("cifar10", "truncated-record", cifar_record(0, 1)[:-100])
    write("cifar10", "empty", b"")
    write("cifar10", "empty-second-file", cifar_record(0, 1) + SEP)
    write("cifar10", "three-files", cifar_record(0, 2) + SEP + cifar_record(1, 5) * 2 + SEP + cifar_record(2, 7))
    write("cifar10", "two-records-limit-1", cifar_record(0, 2) + cifar_record(1, 1)[:-1] + b"\x01")
    write("cifar10", "bad-label-second-file", cifar_record(0, 2) + SEP + cifar_record(1, 255))


# ---- PNG ---------------------------------------------------------------------------------------
def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width, height, color_type, bit_depth=8, rows=None, palette=None, extra=b"", zlib_tail=None):
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    bytes_per_sample = 2 if bit_depth == 16 else 1
    if rows is None:
        rows = []
        for y in range(height):
            row = bytearray()
            for x in range(width):
                for c in range(channels):
                    v = pixel(0, y, x, c) if color_type != 3 else (x + y) % 4
                    row += bytes([v] * bytes_per_sample)
            rows.append(bytes(row))
    raw = b"".join(b"\0" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth,
                                                                  color_type, 0, 0, 0))
    if palette:
        out += png_chunk(b"PLTE", palette)
    compressed = zlib.compress(raw)
    if zlib_tail is not None:  # replace the Adler-32 (the chunk CRC stays correct)
        compressed = compressed[:-4] + zlib_tail
    out += extra + png_chunk(b"IDAT", compressed) + png_chunk(b"IEND", b"")
    return out


def png_interlaced():
    """An Adam7 PNG of 3 x 3 gray pixels (each pass a row of filter byte + pixels)."""
    # Passes 1, 4, 5, 6 (two rows), 7 hold pixels of a 3 x 3 image; 2 and 3 are empty.
    passes = [b"\0\x10", b"\0\x20", b"\0\x30\x40", b"\0\x50", b"\0\x60", b"\0\x70\x80\x90"]
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 3, 8, 0, 0, 0, 1))
    return out + png_chunk(b"IDAT", zlib.compress(b"".join(passes))) + png_chunk(b"IEND", b"")


def bmp(width, height):
    row = (b"\x10\x20\x30" * width).ljust((width * 3 + 3) // 4 * 4, b"\0")
    pixels = row * height
    header = struct.pack("<2sIHHI", b"BM", 54 + len(pixels), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
    return header + info + pixels


def png_seeds():
    seeds = {
        "png-rgb": png(8, 6, 2),
        "png-gray": png(7, 5, 0),
        "png-gray-alpha": png(5, 5, 4),
        "png-rgba": png(6, 4, 6),
        "png-16bit": png(4, 4, 2, 16),
        "png-palette": png(6, 6, 3, palette=bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])),
        "png-text-chunk": png(4, 4, 2, extra=png_chunk(b"tEXt", b"Comment\0echelon")),
    }
    good = png(8, 6, 2)
    # Issue 14: a wrong IHDR or IDAT CRC must be refused; huge claimed dimensions must not allocate.
    seeds["png-bad-ihdr-crc"] = bytearray_flip(good, 8 + 8 + 13 + 1)
    idat = good.index(b"IDAT")
    seeds["png-bad-idat-crc"] = bytearray_flip(good, idat + 6)
    seeds["png-huge-dims"] = png(1, 1, 2, rows=[b"\0\0\0"])[:16] + struct.pack(">II", 65500, 65500) + \
        png(1, 1, 2, rows=[b"\0\0\0"])[24:]
    seeds["png-truncated"] = good[: len(good) - 20]
    seeds["png-no-iend"] = good[: good.index(b"IEND") - 4]
    for name, data in seeds.items():
        write("image", name, b"\x00" + data)           # auto decoder, 3 channels
        write("image", name + "-gray", b"\x80" + data)  # auto decoder, 1 channel
        write("diff_png", name, b"\x00" + data)
    # A PNG with fixed CRCs but claimed huge dimensions (the CRC check passes, the budget must not).
    ihdr = struct.pack(">IIBBBBB", 65500, 65500, 8, 2, 0, 0, 0)
    huge = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + \
        png_chunk(b"IEND", b"")
    write("image", "png-huge-dims-good-crc", b"\x01" + huge)
    write("image", "png-scaled", b"\x05" + png(8, 6, 2))  # decode_image_scaled falls back
    write("image", "png-interlaced", b"\x00" + png_interlaced())
    write("image", "png-bad-adler", b"\x00" + png(4, 4, 2, zlib_tail=b"\0\0\0\0"))
    write("image", "png-chunk-past-end", b"\x00" + png(4, 4, 2)[:33] + struct.pack(">I", 1 << 30) + b"IDAT")
    write("image", "bmp", b"\x00" + bmp(3, 2))
    write("image", "gif-garbage", b"\x00GIF89a\x01\x00\x01\x00")
    write("image", "empty", b"\x00")
    write("image", "channels-1-stb-png", b"\x81" + png(6, 6, 0))
    write("diff_png", "png-huge-dims-good-crc", b"\x00" + huge)


# ---- JPEG --------------------------------------------------------------------------------------
def committed_jpeg_seeds():
    """Without Pillow: the JPEG seeds as committed (diff_jpeg/seed-jpeg-*, minus the byte 0)."""
    folder = os.path.join(ROOT, "diff_jpeg")
    seeds = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.startswith("seed-jpeg-"):
            with open(os.path.join(folder, name), "rb") as f:
                seeds[name[len("seed-"):]] = f.read()[1:]
    return seeds


def jpeg_seeds(committed):
    if Image is None:
        if not committed:
            print("make-fuzz-corpus: no Pillow (python3-pil): JPEG seeds skipped", file=sys.stderr)
            return
        print("make-fuzz-corpus: no Pillow (python3-pil): JPEG seeds from the committed corpus",
              file=sys.stderr)
        write_jpeg_seeds(committed)
        return
    rgb = Image.new("RGB", (16, 12))
    rgb.putdata([(pixel(0, y, x, 0), pixel(0, y, x, 1), pixel(0, y, x, 2)) for y in range(12) for x in range(16)])
    seeds = {}
    for name, image, options in [
        ("jpeg-rgb", rgb, {"quality": 90}),
        ("jpeg-420", rgb, {"quality": 75, "subsampling": 2}),
        ("jpeg-444", rgb, {"quality": 95, "subsampling": 0}),
        ("jpeg-progressive", rgb, {"quality": 80, "progressive": True}),
        ("jpeg-gray", rgb.convert("L"), {"quality": 85}),
        ("jpeg-cmyk", rgb.convert("CMYK"), {"quality": 85}),
        ("jpeg-odd-size", rgb.resize((13, 7)), {"quality": 85}),
    ]:
        out = BytesIO()
        image.save(out, "JPEG", **options)
        seeds[name] = out.getvalue()
    good = seeds["jpeg-rgb"]
    seeds["jpeg-truncated"] = good[: len(good) // 2]
    seeds["jpeg-corrupt"] = bytearray_flip(good, len(good) // 2)
    # SOF0 with claimed 65500 x 65500 (issue 14: must be refused before allocating).
    sof = good.index(b"\xff\xc0")
    seeds["jpeg-huge-dims"] = good[: sof + 5] + struct.pack(">HH", 65500, 65500) + good[sof + 9:]
    write_jpeg_seeds(seeds)


def write_jpeg_seeds(seeds):
    seeds = dict(seeds)
    good = seeds.get("jpeg-rgb")
    if good is not None:
        # The frame-header walk (read_jpeg_frame): fill bytes before a marker, a marker without a
        # length (RST0, TEM) before the frame header, a byte that is not a marker, no frame header.
        seeds["jpeg-fill-bytes"] = good[:2] + b"\xff\xff\xff" + good[2:]
        seeds["jpeg-rst-before-sof"] = good[:2] + b"\xff\xd0\xff\x01" + good[2:]
        seeds["jpeg-junk-after-soi"] = good[:2] + b"\x00" + good[2:]
        seeds["jpeg-no-frame"] = good[:2] + b"\xff\xfe\x00\x04ab"
        # Issue 14: 12-bit (SOF1, precision 12) and lossless (SOF3) JPEGs are reported as
        # unsupported, never as corrupt; YCCK (Adobe APP14 transform 2, 4 components) as CMYK.
        sof = good.index(b"\xff\xc0")
        seeds["jpeg-12bit"] = good[:sof] + b"\xff\xc1" + good[sof + 2:sof + 4] + b"\x0c" + good[sof + 5:]
        seeds["jpeg-lossless"] = good[:sof] + b"\xff\xc3" + good[sof + 2:]
    cmyk = seeds.get("jpeg-cmyk")
    if cmyk is not None and b"Adobe" in cmyk:
        at = cmyk.index(b"Adobe") + 11  # "Adobe", version (2), flags0 (2), flags1 (2), transform
        seeds["jpeg-ycck"] = cmyk[:at] + b"\x02" + cmyk[at + 1:]
    for name, data in seeds.items():
        write("image", name, b"\x00" + data)
        write("image", name + "-stb", b"\x01" + data)
        write("image", name + "-gray", b"\x82" + data)
        write("image", name + "-scaled", b"\x03" + data)     # decode_image_scaled, 1 px a side
        write("image", name + "-scaled-16", b"\x84" + data)  # 16 px a side, 1 channel
        write("diff_jpeg", name, b"\x00" + data)
    # The fused path on a file that is not a JPEG falls back to the general decoder.
    write("diff_jpeg", "png-rgb", b"\x09" + png(8, 6, 2))
    write("diff_jpeg", "png-gray-1ch", b"\x01" + png(5, 4, 0))
