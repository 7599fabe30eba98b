"""TensorFlow Datasets metadata for a TFRecord output, so `tfds.builder_from_directory(OUT)` loads it.

    builder = tfds.builder_from_directory("out/sample")
    ds = builder.as_dataset(split="train")   # {"tokens": uint16[seq_len + 1], ...}

Two files beside the manifest, derived from it alone (no TFDS import: the job does not need it):
  dataset_info.json  the split, its shards' record counts and bytes, and a `filepathTemplate`
                     that names the run directory's shards (`run-<id>/train-00000-of-00003.tfrecord`)
  features.json      one `Tensor` per record feature, in TFDS's raw-bytes encoding (a bytes_list of
                     little-endian values, which is how records.py stores tokens); `valid_labels`
                     is optional: TFDS gives int64's minimum where a record lacks it (every record
                     but the one padded record of a job)

TFDS reads the shards in their order, without the manifest's global shuffle or rank sharding:
`pipeline.tfdata` remains the reader for training.
"""

from __future__ import annotations

import json
import re

from pipeline.format import records

DATASET_INFO_NAME = "dataset_info.json"
FEATURES_NAME = "features.json"
DATASET_NAME = "pile_tokens"
_TENSOR_CLASS = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_DICT_CLASS = "tensorflow_datasets.core.features.features_dict.FeaturesDict"
_SHARD = re.compile(r"^(run-[0-9a-f]{16})/([A-Za-z0-9_]+)-(\d{5})-of-(\d{5})\.tfrecord$")


def metadata_names() -> tuple[str, str]:
    """The files `metadata` writes, relative to the output directory."""
    return DATASET_INFO_NAME, FEATURES_NAME


def _tensor(shape: list[int], dtype: str, encoding: str, optional: bool = False) -> dict:
    tensor = {"dtype": dtype, "encoding": encoding, "shape": {"dimensions": [str(d) for d in shape]}}
    if optional:
        tensor["optional"] = True
    return {"pythonClassName": _TENSOR_CLASS, "tensor": tensor}


def _features(spec: dict) -> dict:
    """features.json's FeaturesDict for the manifest's `features` (records.feature_spec)."""
    features = {}
    for key, field in sorted(spec.items()):
        if field["kind"] == "bytes":
            features[key] = _tensor(field["shape"], field["dtype"], "bytes")
        elif key == records.VALID_LABELS:
            features[key] = _tensor(field["shape"], "int64", "none", optional=True)
        else:
            raise ValueError(f"manifest feature {key!r} of kind {field['kind']!r} has no TFDS equivalent")
    return {"featuresDict": {"features": features}, "pythonClassName": _DICT_CLASS}


def metadata(manifest: dict) -> dict[str, str]:
    """{file name: text} of the TFDS metadata for a TFRecord manifest.

    Raises:
        ValueError: a shard whose path the template cannot name (then TFDS would read other files).
    """
    split, shards = manifest["split"], manifest["shards"]
    template = None
    for index, shard in enumerate(shards):
        match = _SHARD.match(shard["path"])
        if not match or match.group(2) != split or int(match.group(3)) != index or int(match.group(4)) != len(shards):
            raise ValueError(f"shard {shard['path']!r} is not shard {index} of {len(shards)} of split {split!r}")
        template = f"{match.group(1)}/{{SPLIT}}-{{SHARD_X_OF_Y}}.tfrecord"
    info = {
        "description": f"Token shards written by {manifest['created_by']}; manifest.json beside this file "
                       "is the full record of the output.",
        "fileFormat": "tfrecord",
        "name": DATASET_NAME,
        "splits": [{
            "filepathTemplate": template,
            "name": split,
            "numBytes": str(sum(s["bytes"] for s in shards)),
            "shardLengths": [str(s["records"]) for s in shards],
        }],
        "version": f"{manifest['format_version']}.0.0",
    }
    return {
        DATASET_INFO_NAME: json.dumps(info, indent=2, sort_keys=True) + "\n",
        FEATURES_NAME: json.dumps(_features(manifest["features"]), indent=2, sort_keys=True) + "\n",
    }
