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


# ---- PNG ---------------------------------------------------------------------------------------
def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width, height, color_type, bit_depth=8, rows=None, palette=None, extra=b""):
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
    out += extra + png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b"")
    return out


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
    write("diff_png", "png-huge-dims-good-crc", b"\x00" + huge)


# ---- JPEG --------------------------------------------------------------------------------------
def jpeg_seeds():
    if Image is None:
        print("make-fuzz-corpus: no Pillow (python3-pil): JPEG seeds skipped", file=sys.stderr)
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
    for name, data in seeds.items():
        write("image", name, b"\x00" + data)
        write("image", name + "-stb", b"\x01" + data)
        write("image", name + "-gray", b"\x82" + data)
        write("diff_jpeg", name, b"\x00" + data)


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
             7: ["float32", "float", "int64", "uint8", "bf16", ""],
             8: ["none", "crop:4,flip", "flip,crop:12", "crop:4,blur", "flip,flip", "crop:4.5",
                 "crop:", "none,flip", "crop:99999999999999999999", ",flip"]}
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


def main():
    clear_seeds()
    idx_seeds()
    cifar_seeds()
    png_seeds()
    jpeg_seeds()
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
