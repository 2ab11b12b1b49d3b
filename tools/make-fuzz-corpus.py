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
import zlib

from fuzz_corpus_formats import (ROOT, SEP, cifar_seeds, clear_seeds, committed_jpeg_seeds,
                                 idx_labels, idx_seeds, jpeg_seeds, png_seeds, write)


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
