"""Stand-in for HydraGNN's gfm_mlip_all_mpnn.py: reads the lever values where the real one does."""
import argparse
import json
import os

import hydragnn

parser = argparse.ArgumentParser()
parser.add_argument("--inputfile")
parser.add_argument("--batch_size", type=int, default=None)
parser.add_argument("--precision", type=str, choices=["fp32", "fp64", "bf16"], default="fp64")
parser.add_argument("--epochs", type=int, default=None)
args = parser.parse_args()
config = json.load(open(args.inputfile))
if args.batch_size is not None:
    config["NeuralNetwork"]["Training"]["batch_size"] = args.batch_size
config["NeuralNetwork"]["Training"]["precision"] = args.precision.lower()
model = hydragnn.models.create_model_config(config=config["NeuralNetwork"], verbosity=0)
print(json.dumps({"batch_size": config["NeuralNetwork"]["Training"].get("batch_size"),
                  "precision": config["NeuralNetwork"]["Training"]["precision"],
                  "num_workers": int(os.getenv("HYDRAGNN_NUM_WORKERS", "0")),
                  "model": type(model).__name__}))
