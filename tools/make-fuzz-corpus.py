#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/seed-*).

Small valid files of each format (generated here, never downloaded; a few KB each) plus the
malformed inputs users hit (issue "A run a user can trust"): each becomes one seed, so the replay
test (ctest -L fuzz-replay) runs them on every build. Inputs that once broke a parser live next to
the seeds as crash-*/regress-* files and are never rewritten by this script.

    python3 tools/make-fuzz-corpus.py            # rewrites every seed-* file
Needs Pillow (Debian python3-pil) for the JPEG seeds; without it those are skipped.
"""
import gzip
import json
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


# ---- safetensors and checkpoints ---------------------------------------------------------------
def safetensors_file(tensors, metadata=None, raw_header=None, align=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if align:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def lenet_like_checkpoint(num_classes="10", dtype="F32", **meta_overrides):
    """A checkpoint-shaped file (small tensors; the metadata of an echelon checkpoint)."""
    f32 = lambda n: struct.pack("<%df" % n, *([0.01] * n))
    i64 = lambda v: struct.pack("<q", v)
    tensors = {
        "0.weight": ("F32", [6, 1, 5, 5], f32(150)),
        "0.bias": ("F32", [6], f32(6)),
        "9.weight": (dtype, [10, 84], f32(840)),
        "trainer.epoch": ("I64", [], i64(1)),
        "trainer.global_step": ("I64", [], i64(10)),
        "trainer.seed": ("I64", [], i64(0)),
    }
    meta = {"format": "echelon.checkpoint.v1", "model": "lenet5", "dataset": "fashion-mnist",
            "data_dir": "", "in_channels": "1", "num_classes": num_classes, "image_size": "28",
            "epoch": "1", "global_step": "10", "seed": "0", "wall_s": "1.5", "config": "{}",
            "history": json.dumps([{"epoch": 0, "global_step": 10, "lr": 0.01, "train_loss": 1.0,
                                    "train_acc": 0.5, "test_loss": 1.0, "test_acc": 0.5, "train_images": 640,
                                    "fresh_images": 640, "train_s": 1.0, "eval_s": 0.5,
                                    "images_per_s": 640.0}]),
            "steps": "[[10,1.0,0.5]]"}
    meta.update(meta_overrides)
    return safetensors_file(tensors, meta)


def safetensors_seeds():
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    write("safetensors", "plain", safetensors_file({"a": ("F32", [2, 2], f32), "b": ("U8", [3], b"\1\2\3")},
                                                   {"note": "x"}))
    write("safetensors", "all-dtypes", safetensors_file({
        "f64": ("F64", [1], struct.pack("<d", 1.5)), "i32": ("I32", [2], struct.pack("<2i", -1, 7)),
        "i64": ("I64", [], struct.pack("<q", 5)), "empty": ("F32", [0, 3], b"")}))
    write("safetensors", "checkpoint", lenet_like_checkpoint())
    # Issue 14: dtype mismatch, absurd metadata, non-integer shape/offsets, invalid UTF-8.
    write("safetensors", "checkpoint-i32-weight", lenet_like_checkpoint(dtype="I32"))
    write("safetensors", "checkpoint-num-classes-1e12", lenet_like_checkpoint(num_classes="1000000000000"))
    write("safetensors", "checkpoint-unknown-model", lenet_like_checkpoint(model="lenet9"))
    write("safetensors", "checkpoint-nan-loss", lenet_like_checkpoint(steps="[[10,1.0,null]]"))
    write("safetensors", "shape-float", safetensors_file({}, raw_header=b'{"a":{"dtype":"F32","shape":[1.0],'
                                                                        b'"data_offsets":[0,4]}}') + b"\0" * 4)
    write("safetensors", "offset-float", safetensors_file({}, raw_header=b'{"a":{"dtype":"F32","shape":[1],'
                                                                         b'"data_offsets":[0,4.0]}}') + b"\0" * 4)
    write("safetensors", "header-not-utf8", safetensors_file({}, raw_header=b'{"\xff":{"dtype":"U8","shape":[0],'
                                                                            b'"data_offsets":[0,0]}}'))
    write("safetensors", "header-overlong-utf8", safetensors_file({}, raw_header=b'{"\xc0\xaf":{"dtype":"U8",'
                                                                                 b'"shape":[0],"data_offsets":[0,0]}}'))
    write("safetensors", "header-lone-surrogate", safetensors_file({}, raw_header=b'{"\\ud800":{"dtype":"U8",'
                                                                                  b'"shape":[0],"data_offsets":[0,0]}}'))
    write("safetensors", "header-length-huge", struct.pack("<Q", 2**63) + b"{}")
    write("safetensors", "overlap", safetensors_file({}, raw_header=b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                                                                    b'"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}') + b"abcd")
    write("safetensors", "zero-dim-huge-strides", safetensors_file({}, raw_header=b'{"a":{"dtype":"F32","shape":'
                                                                                  b'[0,4294967296,4294967296,4],"data_offsets":[0,0]}}'))
    write("safetensors", "directory-like-empty", b"")
    # Each check of load_checkpoint / read_info / restore_model (tests/fuzz/safetensors.cpp).
    broken = {"format": {"format": "echelon.checkpoint.v0"}, "in-channels-text": {"in_channels": "1x"},
              "num-classes-text": {"num_classes": ""}, "seed-text": {"seed": "-x"},
              "wall-not-number": {"wall_s": '"slow"'}, "wall-invalid-json": {"wall_s": "1.5.2"},
              "config-invalid": {"config": "{"}, "history-not-array": {"history": "{}"},
              "history-record-bad": {"history": '[{"epoch":"zero"}]'}, "steps-bad-arity": {"steps": "[[1,2]]"},
              "steps-not-array": {"steps": "[1]"}, "class-names": {"class_names": '["a","b"]'},
              "class-names-ok": {"class_names": json.dumps([str(i) for i in range(10)])},
              "class-names-not-strings": {"class_names": "[1,2]"}, "epoch-mismatch": {"epoch": "0"},
              "image-size": {"image_size": "1000"}, "in-channels-3": {"in_channels": "3"},
              "model-resnet": {"model": "resnet20"}, "no-history-base": {"history_epoch_base": None}}
    for name, override in broken.items():
        meta = {k: v for k, v in override.items() if v is not None}
        data = lenet_like_checkpoint(**meta)
        if None in override.values():
            data = data.replace(b'"history_epoch_base"', b'"history_epoch_bass"')
        write("safetensors", "meta-" + name, data)
    for key in ["model", "dataset", "data_dir", "in_channels", "num_classes", "image_size", "epoch",
                "global_step", "seed", "wall_s", "config", "history", "steps"]:
        data = lenet_like_checkpoint().replace(b'"%s":' % key.encode(), b'"%s_":' % key.encode(), 1)
        write("safetensors", "meta-missing-" + key, data)
    no_epoch = lenet_like_checkpoint().replace(b'"trainer.epoch"', b'"trainer.epocx"')
    write("safetensors", "trainer-epoch-renamed", no_epoch)
    write("safetensors", "optimizer-state", safetensors_file(
        {"0.weight": ("F32", [6, 1, 5, 5], b"\0" * 600), "optimizer.0.momentum": ("F32", [2], b"\0" * 8),
         "trainer.epoch": ("I64", [], struct.pack("<q", 0))},
        {"format": "echelon.checkpoint.v1", "model": "lenet5", "dataset": "x", "data_dir": "", "in_channels": "1",
         "num_classes": "10", "image_size": "0", "epoch": "0", "global_step": "0", "seed": "1", "wall_s": "0",
         "config": "{}", "history": "[]", "steps": "[]"}))
    write("safetensors", "metadata-not-object", safetensors_file({}, raw_header=b'{"__metadata__":[1]}'))
    write("safetensors", "metadata-value-number", safetensors_file({}, raw_header=b'{"__metadata__":{"a":1}}'))
    write("safetensors", "entry-not-object", safetensors_file({}, raw_header=b'{"a":[1]}'))
    write("safetensors", "entry-lacks-shape", safetensors_file({}, raw_header=b'{"a":{"dtype":"U8","data_offsets":[0,0]}}'))
    write("safetensors", "dtype-bf16", safetensors_file({}, raw_header=b'{"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}') + b"\0\0")
    write("safetensors", "offsets-three", safetensors_file({}, raw_header=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}') + b"\0")
    write("safetensors", "offsets-reversed", safetensors_file({}, raw_header=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}') + b"\0")
    write("safetensors", "offsets-past-end", safetensors_file({}, raw_header=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,9]}}') + b"\0")
    write("safetensors", "negative-dim", safetensors_file({}, raw_header=b'{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}'))
    write("safetensors", "span-mismatch", safetensors_file({}, raw_header=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}') + b"\0" * 4)
    write("safetensors", "hole", safetensors_file({}, raw_header=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}') + b"\0\0")
    write("safetensors", "trailing-data", safetensors_file({"a": ("U8", [1], b"\1")}) + b"\0")
    write("safetensors", "header-array", safetensors_file({}, raw_header=b'[1,2]'))
    write("safetensors", "header-short", struct.pack("<Q", 1) + b"{")
    write("safetensors", "header-over-100mb", struct.pack("<Q", 100000001) + b"{}")
    write("safetensors", "seven-bytes", b"\0" * 7)


# ---- JSON, config.json, command lines, spec strings -----------------------------------------------
CONFIG = {"model": "lenet5", "data": "synthetic", "data-dir": "", "epochs": 2, "batch-size": 16, "lr": 0.01,
          "momentum": 0.9, "nesterov": False, "wd": 0.0, "schedule": "multistep", "warmup-epochs": 0,
          "step-size": 30, "milestones": [1, 2], "gamma": 0.1, "device": "cpu", "conv-impl": "ours",
          "seed": 1, "threads": 0, "out": "", "deterministic": True, "limit-train": 0, "limit-test": 0,
          "echo": "1", "echo-at": "after-augment", "shuffle-buffer": 0, "workers": 1, "log-every": 50}


def json_seeds():
    write("json", "config", json.dumps(CONFIG, indent=2).encode())
    write("json", "metrics-line", b'{"kind":"step","epoch":0,"step":50,"loss":2.30125,"lr":0.01,"images_per_s":1234.5}')
    write("json", "nonfinite", b'{"loss":"NaN","best":"Infinity","worst":"-Infinity","x":[1e308,-0.0,1E-310]}')
    write("json", "nested", b'[[[[{"a":[{"b":null}]}]]]],' [:-1])
    write("json", "big-ints", b'[9223372036854775807,-9223372036854775808,18446744073709551615,1e400]')
    write("json", "unicode", '{"name":"caf\u00e9 \u2603 \U0001F600","esc":"\\u00e9\\n\\t\\"\\\\"}'.encode())
    write("json", "duplicate-key", b'{"a":1,"a":2}')
    write("json", "deep", b"[" * 300 + b"]" * 300)
    write("json", "invalid-utf8", b'{"a":"\xff"}')
    write("json", "lone-surrogate", b'{"a":"\\ud800"}')
    write("json", "trailing", b'{"a":1} x')
    write("json", "nan-literal", b'{"loss":NaN}')
    write("json", "every-kind", b'{"b":true,"i":3,"d":2.0,"f":2.5,"big":1e19,"neg":-1e19,"s":"x","n":null,'
                                b'"a":[false,0,-0.0],"o":{"k":"v"},"inf":"Infinity","ninf":"-Infinity","nan":"NaN"}')
    write("json", "scalar-root", b'"just a string"')
    write("json", "empty", b"")
    write("json", "cbor-like", b"\xa1\x61\x61\x01")


def resume_seeds():
    write("resume", "config", json.dumps(CONFIG, indent=2).encode())
    write("resume", "config-with-flags", json.dumps(CONFIG).encode() + SEP + b"--epochs\n5\n--lr\n0.1")
    write("resume", "config-pipeline-flags", json.dumps(CONFIG).encode() + SEP + b"--ppv\n2,5\n--pipeline\n4")
    bad = dict(CONFIG, lr=1e30, epochs=-1)
    write("resume", "config-bad-values", json.dumps(bad).encode())
    write("resume", "config-wrong-types", json.dumps(dict(CONFIG, lr="fast", milestones="1,2")).encode())
    write("resume", "config-not-object", b"[1,2,3]")
    write("resume", "config-invalid", b'{"model": "lenet5",')
    write("resume", "config-huge-seed", json.dumps(dict(CONFIG, seed=-1, threads=2**40)).encode())
    write("resume", "config-data-folder", json.dumps(dict(CONFIG, data="folder")).encode())
    # Each key of TrainOptions::from_json with the wrong type (the error names the key), and the
    # pipeline flags saved under "engine" (restore_pipeline_flags / restore_distributed_flags).
    wrong = {"model": 1, "data": [], "data-dir": 2, "epochs": "2", "batch-size": 1.5, "lr": "x",
             "momentum": None, "nesterov": 1, "wd": {}, "schedule": 3, "warmup-epochs": "w", "step-size": 2.5,
             "milestones": [1, "2"], "gamma": [], "device": 0, "conv-impl": 1, "seed": 0.5, "threads": "t",
             "out": 1, "deterministic": "yes", "limit-train": "1", "limit-test": 1e300, "echo": 2,
             "echo-at": 1, "shuffle-buffer": "s", "workers": 1.5, "log-every": True, "engine": []}
    for key, value in wrong.items():
        write("resume", "key-" + key, json.dumps(dict(CONFIG, **{key: value})).encode())
    engine = {"pipeline": 2, "ppv": "", "balance": "none", "schedule-pipeline": "gpipe", "micro-batches": 2,
              "hybrid-switch": 0.5, "predict-weights": False, "data-parallel": 1}
    write("resume", "engine", json.dumps(dict(CONFIG, engine=engine)).encode())
    write("resume", "engine-given-flags", json.dumps(dict(CONFIG, engine=engine)).encode() + SEP +
          b"--pipeline\n3\n--schedule-pipeline\nstale\n--micro-batches\n1\n--hybrid-switch\n2\n"
          b"--predict-weights\n--data-parallel\n1\n--schedule\ncosine\n--out\n/x")
    for key, value in {"pipeline": "2", "ppv": 25, "balance": 1, "schedule-pipeline": 2, "micro-batches": "m",
                       "hybrid-switch": "h", "predict-weights": 1, "data-parallel": "d"}.items():
        write("resume", "engine-" + key, json.dumps(dict(CONFIG, engine=dict(engine, **{key: value}))).encode())
    write("resume", "engine-ppv", json.dumps(dict(CONFIG, engine=dict(engine, ppv="2,5", pipeline=3))).encode())
    write("resume", "engine-bad-schedule", json.dumps(dict(CONFIG, engine=dict(engine, **{"schedule-pipeline": "x"}))).encode())
    invalid = {"model": "lenet9", "data": "imagenet", "device": "gpu", "device-cuda": "cuda:1",
               "device-auto": "auto", "conv-impl": "winograd", "echo": "0.5", "echo-text": "x",
               "echo-at": "never", "schedule": "warm", "milestones": [3, 1]}
    for key, value in invalid.items():
        write("resume", "value-" + key, json.dumps(dict(CONFIG, **{key.split("-cuda")[0].split("-auto")[0].split("-text")[0]: value})).encode())
    # --schedule naming a pipeline schedule on resume, and a saved hybrid schedule whose switch
    # epoch is checked (route_schedule_flag, finish_pipeline_options).
    write("resume", "schedule-pipeline-flag", json.dumps(dict(CONFIG, engine=engine)).encode() + SEP +
          b"--schedule\ngpipe\n--schedule-pipeline\ngpipe")
    write("resume", "engine-hybrid", json.dumps(dict(CONFIG, engine=dict(engine, **{"schedule-pipeline": "hybrid",
                                                                                  "hybrid-switch": 7}))).encode())
    write("resume", "deterministic-echo-auto", json.dumps(dict(CONFIG, echo="auto", deterministic=True)).encode())
    write("resume", "schedule-lr-flag", json.dumps(CONFIG).encode() + SEP + b"--schedule\ncosine\n--lr-schedule\ncosine")


def cli_seeds():
    lines = {
        "train-basic": ["train", "--model", "lenet5", "--data", "synthetic", "--epochs", "2", "--device", "cpu"],
        "train-pipeline": ["train", "--model", "lenet5", "--data", "synthetic", "--device", "cpu", "--pipeline", "2",
                           "--schedule", "stale", "--micro-batches", "2", "--balance", "auto"],
        "train-ppv-conflict": ["train", "--pipeline", "4", "--ppv", "2,5", "--device", "cpu", "--data", "synthetic"],
        "train-schedules": ["train", "--schedule", "cosine", "--lr-schedule", "step", "--device", "cpu"],
        "train-multistep": ["train", "--lr-schedule", "multistep", "--milestones", "3,1", "--device", "cpu"],
        "train-echo": ["train", "--echo", "auto", "--deterministic", "--device", "cpu", "--echo-at", "batch"],
        "train-hybrid": ["train", "--schedule-pipeline", "hybrid", "--hybrid-switch", "0.5", "--pipeline", "3",
                         "--device", "cpu", "--data", "synthetic"],
        "train-bad-numbers": ["train", "--lr", "1e999", "--epochs", "99999999999999999999", "--device", "cpu"],
        "eval": ["eval", "--checkpoint", "/nonexistent.safetensors", "--batch-size", "0"],
        "eval-missing": ["eval"],
        "models": ["models"],
        "help": ["--help"],
        "train-help": ["train", "--help"],
        "unknown-subcommand": ["trian", "--model", "lenet5"],
        "unknown-flag": ["train", "--modle", "lenet5"],
        "device-bad": ["train", "--device", "cuda:99999999", "--data", "synthetic"],
        "resume-missing": ["train", "--resume", "/no/such/run"],
        "empty": [],
    }
    # Every check of validate() and of the pipeline/bench flags, each after a valid command (the
    # checks run in order: a fuzzer rarely spells the valid prefix itself).
    base = ["train", "--model", "lenet5", "--data", "synthetic", "--device", "cpu"]
    one_bad = {
        "model": ["--model", "lenet9"], "data": ["--data", "imagenet"], "data-folder": ["--data", "folder"],
        "epochs": ["--epochs", "0"], "batch": ["--batch-size", "0"], "lr": ["--lr", "0"],
        "momentum": ["--momentum", "1"], "nesterov": ["--nesterov", "--momentum", "0"], "wd": ["--wd", "-1"],
        "lr-schedule": ["--lr-schedule", "warm"], "schedule-unknown": ["--schedule", "warm"],
        "warmup": ["--warmup-epochs", "-1"], "step-size": ["--step-size", "0"], "gamma": ["--gamma", "0"],
        "milestones": ["--milestones", "3,1"], "multistep-no-milestones": ["--lr-schedule", "multistep"],
        "cuda": ["--device", "cuda:1"], "device-garbage": ["--device", "gpu0"],
        "conv-impl": ["--conv-impl", "winograd"], "threads": ["--threads", "-1"],
        "limit-train": ["--limit-train", "-1"], "limit-test": ["--limit-test", "-1"],
        "workers": ["--workers", "0"], "shuffle": ["--shuffle-buffer", "-1"], "log-every": ["--log-every", "-1"],
        "progress": ["--progress", "fancy"], "stop-after": ["--stop-after-epoch", "-1"],
        "echo": ["--echo", "0.5"], "echo-at": ["--echo-at", "never"],
        "deterministic-echo": ["--deterministic", "--echo", "auto"],
        "deterministic-workers": ["--deterministic", "--workers", "2"],
        "out-existing-run": ["--out", "/run"], "out-overwrite": ["--out", "/run", "--overwrite"],
        "resume-run": ["--resume", "/run", "--epochs", "3", "--lr-schedule", "step"],
        "resume-schedule-lr": ["--resume", "/run", "--schedule", "cosine"],
        "resume-pipeline": ["--resume", "/run", "--pipeline", "2", "--data-parallel", "1"],
        "resume-out": ["--resume", "/run", "--out", "/other"],
        "pipeline-zero": ["--pipeline", "0"], "micro-zero": ["--pipeline", "2", "--micro-batches", "0"],
        "ppv-balance": ["--ppv", "2,5", "--balance", "auto"], "ppv-bad": ["--ppv", "5,2"],
        "ppv-agree": ["--ppv", "2,5", "--pipeline", "3"], "balance-bad": ["--balance", "best"],
        "balance-auto": ["--balance", "auto"], "hybrid-bad": ["--pipeline", "2", "--schedule", "hybrid",
                                                               "--hybrid-switch", "-1"],
        "hybrid-fraction": ["--pipeline", "2", "--schedule-pipeline", "hybrid", "--hybrid-switch", "0.5",
                            "--epochs", "4"],
        "micro-no-pipeline": ["--micro-batches", "2"], "predict-no-pipeline": ["--predict-weights"],
        "gpipe-no-pipeline": ["--schedule-pipeline", "gpipe"], "sequential-no-pipeline": ["--schedule", "sequential"],
        "schedules-disagree": ["--schedule", "stale", "--schedule-pipeline", "gpipe", "--pipeline", "2"],
        "lr-schedules-disagree": ["--schedule", "cosine", "--lr-schedule", "step"],
        "data-parallel": ["--data-parallel", "0"], "trace": ["--pipeline", "2", "--trace", "/t.json"],
        "seed-negative": ["--seed", "-1"], "epochs-float": ["--epochs", "1.5"], "lr-nan": ["--lr", "nan"],
    }
    def command(extra):
        # A flag of the base given again replaces its value (CLI11 refuses a flag given twice).
        args, given = list(base), set(a for a in extra if a.startswith("--"))
        out = []
        i = 0
        while i < len(args):
            if args[i] in given:
                i += 2
                continue
            out.append(args[i])
            i += 1
        return out + extra
    one_bad.update({"echo-text": ["--echo", "x"], "echo-empty": ["--echo", ""], "echo-inf": ["--echo", "inf"],
                    "device-auto": ["--device", "auto"], "device-cuda": ["--device", "cuda"]})
    for name, extra in one_bad.items():
        write("cli", "v-" + name, "\n".join(command(extra)).encode())
    bench = {
        "op-list": ["bench", "op", "--list"],
        "op-conv": ["bench", "op", "conv2d", "--input", "1,2,8,8", "--kernel", "3", "--stride", "1", "--pad", "1",
                    "--impl", "naive,fast", "--warmup", "0", "--repeats", "1", "--device", "cpu"],
        "op-shape-bad": ["bench", "op", "matmul", "--input", "4,x", "--n", "-2"],
        "op-unknown": ["bench", "op", "convolve"], "op-dim-zero": ["bench", "op", "relu", "--input", "4,0"],
        "op-huge": ["bench", "op", "matmul", "--input", "2000000,2000000"],
        "op-window": ["bench", "op", "max_pool2d", "--kernel", "-1"],
        "op-impl": ["bench", "op", "matmul", "--impl", "cublas"], "op-default": ["bench", "op", "matmul"],
        "model": ["bench", "model", "lenet5", "--per-layer", "--batch-size", "2", "--channels", "1",
                  "--image-size", "28", "--classes", "10", "--json", "/b.json"],
        "pipeline": ["bench", "pipeline", "--model", "lenet5", "--pipeline", "3", "--schedule", "gpipe",
                     "--micro-batches", "2", "--steps", "2", "--warmup", "1"],
        "pipeline-bad-schedule": ["bench", "pipeline", "--schedule", "pipedream"],
        "pipeline-ppv": ["bench", "pipeline", "--ppv", "2,4", "--balance", "auto"],
        "loader": ["bench", "loader", "--data", "synthetic", "--echo", "2", "--echo-at", "batch",
                   "--ring-capacity", "4", "--batches", "3", "--step-ms", "1", "--html", "/r.html"],
        "none": ["bench"], "version": ["--version"], "eval-help": ["eval", "--help"],
        "eval-full": ["eval", "--checkpoint", "/c.safetensors", "--data", "cifar10", "--data-dir", "/d",
                      "--device", "cpu", "--batch-size", "8", "--limit-test", "4", "--workers", "2"],
        "flag-first": ["--model", "lenet5"], "equals": ["train", "--epochs=3", "--lr=0.1"],
        "two-subcommands": ["train", "eval"], "models-extra": ["models", "--epochs", "2"],
    }
    for name, args in bench.items():
        write("cli", "b-" + name, "\n".join(args).encode())
    for name, args in lines.items():
        write("cli", name, "\n".join(args).encode())


def spec_seeds():
    cases = {0: ["2,5", "1", "3,2", "2,,5", ",", "2,5,", "99999999999", "-1", "1,2,3,4,5,6,7,8", " 2"],
             1: ["cpu", "cuda", "cuda:0", "cuda:12", "cuda:", "cuda:-1", "cuda:9999999", "gpu", "CPU", "cuda:0,cuda:1"],
             2: ["auto", "cpu", "cuda:0", "cuda:3", "tpu"],
             3: ["stale", "stash", "gpipe", "hybrid", "sequential", "pipedream", ""],
             4: ["1", "2.5", "auto", "0.5", "nan", "inf", "1e308", "0x10", "1,5", "", "2 "],
             5: ["before-augment", "after-augment", "batch", "after"],
             6: ["fail", "skip", "retry"],
             7: ["float32", "float", "int64", "uint8", "bf16", "", "float64", "double", "int32",
                 "int", "long"],
             8: ["none", "crop:4,flip", "flip,crop:12", "crop:4,blur", "flip,flip", "crop:4.5",
                 "crop:", "none,flip", "crop:99999999999999999999", ",flip"]}
    # --devices: byte 0 = 9 + 10 * (partitions - 1).
    for i, (partitions, text) in enumerate([(2, "cuda:0,cuda:1"), (4, "cuda:0,cuda:1"),
                                            (3, "cuda:0,cuda:1"), (2, "cuda:0,,cuda:1"),
                                            (1, "cpu"), (2, "gpu:0,cuda:1"), (2, "cuda:0,")]):
        write("spec", "p9-%02d" % i, bytes([9 + 10 * (partitions - 1)]) + text.encode())
    # --ppv cut points against a model of 12 layers: the last must be below 12.
    cases[0] += ["3,7,11", "12", "0,4", "11"]
    cases[3] += ["stale\0gpipe"]
    for parser, texts in cases.items():
        for i, text in enumerate(texts):
            write("spec", "p%d-%02d" % (parser, i), bytes([parser]) + text.encode())


def gzip_seeds():
    payload = idx_labels(list(range(10)) * 3)
    one = gzip.compress(payload, mtime=0)
    write("diff_gzip", "plain", payload)
    write("diff_gzip", "one-member", one)
    write("diff_gzip", "two-members", gzip.compress(payload[:10], mtime=0) + gzip.compress(payload[10:], mtime=0))
    write("diff_gzip", "empty-member", gzip.compress(b"", mtime=0))
    write("diff_gzip", "truncated", one[:-5])
    write("diff_gzip", "corrupt-crc", one[:-8] + b"\0\0\0\0" + one[-4:])
    write("diff_gzip", "trailing-garbage", one + b"garbage")
    write("diff_gzip", "trailing-zeros", one + b"\0" * 8)
    write("diff_gzip", "stored-block", gzip.compress(payload, compresslevel=0, mtime=0))
    write("diff_gzip", "magic-only", b"\x1f\x8b")
    # Header fields (FNAME, FEXTRA, FCOMMENT, FHCRC), output past one 64 KB inflate chunk, an
    # empty member between two, and a non-deflate method.
    body = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = body.compress(payload) + body.flush()
    trailer = struct.pack("<II", zlib.crc32(payload), len(payload))
    named = b"\x1f\x8b\x08\x1c\0\0\0\0\0\xff" + b"\x04\0ab\0\0" + b"name\0" + b"comment\0"
    write("diff_gzip", "header-fields", named + deflated + trailer)
    hcrc = b"\x1f\x8b\x08\x02\0\0\0\0\0\xff"
    write("diff_gzip", "header-crc", hcrc + struct.pack("<H", zlib.crc32(hcrc) & 0xFFFF) + deflated + trailer)
    write("diff_gzip", "header-crc-wrong", hcrc + b"\0\0" + deflated + trailer)
    write("diff_gzip", "big-output", gzip.compress(b"\0" * 200000, mtime=0))
    write("diff_gzip", "empty-middle-member", one + gzip.compress(b"", mtime=0) + one)
    write("diff_gzip", "method-not-deflate", b"\x1f\x8b\x07" + one[3:])
    write("diff_gzip", "second-member-truncated", one + one[:12])


def main():
    committed = committed_jpeg_seeds()
    clear_seeds()
    idx_seeds()
    cifar_seeds()
    png_seeds()
    jpeg_seeds(committed)
    safetensors_seeds()
    json_seeds()
    resume_seeds()
    cli_seeds()
    spec_seeds()
    gzip_seeds()
    total = sum(len(files) for _, _, files in os.walk(ROOT))
    print("make-fuzz-corpus: %d files under %s" % (total, os.path.relpath(ROOT)))


if __name__ == "__main__":
    main()
