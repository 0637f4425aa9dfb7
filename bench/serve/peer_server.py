"""The server a PyTorch user writes instead of `troupe serve`: FastAPI on uvicorn workers under
gunicorn, the same model.pt through torch.jit.load, the same endpoint and JSON (the Open Inference
Protocol's infer request and answer), one request per forward (no batching), TORCH_THREADS intra-op
threads per worker. bench/serve/run.py starts it:

  MODEL_DIR=... MODEL_NAME=mlp TORCH_THREADS=1 gunicorn -w R -k uvicorn.workers.UvicornWorker \
      -b 127.0.0.1:PORT --chdir bench/serve peer_server:app

Written as such servers usually are (the FastAPI docs' pattern with a plain Request and json),
with the settings a careful user would pick: eval mode, torch.inference_mode, set_num_threads,
the profiling executor off, a few warm-up forwards.
"""
import json
import os

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

MODEL_DIR = os.environ["MODEL_DIR"]
NAME = os.environ.get("MODEL_NAME", "model")
torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
torch._C._jit_set_profiling_mode(False)

with open(os.path.join(MODEL_DIR, "model.json")) as f:
    META = json.load(f)
MODULE = torch.jit.load(os.path.join(MODEL_DIR, "model.pt")).eval()
TAKES_IDS = META["forward"] == ["dense", "ids"]
MULTICLASS = META["output"]["kind"] == "multiclass"
VERSION = f"{META['job']['id']}@{META['created_unix_ms']}"

with torch.inference_mode():
    for rows in (1, 64):
        args = [torch.zeros(rows, META["dense_dim"])]
        if TAKES_IDS:
            args.append(torch.zeros(rows, META["fields"], dtype=torch.int64))
        for _ in range(20):
            MODULE(*args)

app = FastAPI()


@app.post(f"/v2/models/{NAME}/infer")
async def infer(request: Request):
    try:
        body = await request.json()
        inputs = {t["name"]: t for t in body["inputs"]}
        dense = torch.tensor(inputs["dense"]["data"], dtype=torch.float32).reshape(inputs["dense"]["shape"])
        args = [dense]
        if TAKES_IDS:
            args.append(torch.tensor(inputs["ids"]["data"], dtype=torch.int64).reshape(inputs["ids"]["shape"]))
    except Exception as e:  # noqa: BLE001
        return JSONResponse({"error": str(e)}, status_code=400)
    with torch.inference_mode():
        logits = MODULE(*args)
    if logits.dim() == 1:
        logits = logits.unsqueeze(1)
    rows, width = logits.shape
    probs = torch.softmax(logits, dim=1) if MULTICLASS else torch.sigmoid(logits)
    outputs = [{"name": "logits", "datatype": "FP32", "shape": [rows, width], "data": logits.flatten().tolist()},
               {"name": "probabilities", "datatype": "FP32", "shape": [rows, width], "data": probs.flatten().tolist()}]
    if MULTICLASS:
        outputs.append({"name": "class_ids", "datatype": "INT64", "shape": [rows],
                        "data": logits.argmax(dim=1).tolist()})
    answer = {"model_name": NAME, "model_version": VERSION, "outputs": outputs}
    if "id" in body:
        answer["id"] = body["id"]
    return Response(json.dumps(answer), media_type="application/json")


@app.get("/v2/health/ready")
async def ready():
    return {"ready": True}
