"""Gantry's MLServer runtimes, in the serving environment only (Gantry never imports
them): the local backend's replicas import this file (serve_model.py), and on
Kubernetes the endpoint's init container writes it beside the model's
model-settings.json, from where MLServer imports a model's own runtime
(endpoints/kubernetes.py).

Two runtimes, named by endpoints.local.served_file: scikit-learn models saved by MLflow
(`CheckedSKLearnModel`) and TorchScript modules (`CheckedTorchScriptModel`). Each answers
a payload the model refuses as the client's error: 400 with the model's words, where
MLServer would answer a bare 500. torch is imported only when a TorchScript model
loads, so a scikit-learn replica, and an environment without torch, never needs it.
"""

import re

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, NumpyRequestCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, RequestOutput
from mlserver.utils import get_model_uri
from mlserver_sklearn import SKLearnModel


class CheckedSKLearnModel(SKLearnModel):
    """MLServer's scikit-learn runtime, with the model's refusal of a payload (wrong
    number of features, values that are not numbers) answered as the client's error:
    400 with scikit-learn's message, where MLServer would answer a bare 500."""

    async def predict(self, payload):
        try:
            return await super().predict(payload)
        except (ValueError, TypeError, IndexError) as exc:
            raise InferenceError(str(exc)) from exc


PREDICT_OUTPUT = "predict"  # the class index per row, as scikit-learn's runtime names it
RAW_OUTPUT = "output-0"  # what the module's forward returned, as it was

NO_TORCH = (
    "TorchScript models need PyTorch in the serving environment, and it has none: on "
    "the local backend `make serving-torch` installs it into .venv-serving; on "
    "Kubernetes the endpoint image (GANTRY_K8S_ENDPOINT_IMAGE) must have torch."
)


class CheckedTorchScriptModel(MLModel):
    """A TorchScript module (what `torch.jit.save` writes), run on the CPU.

    A request's one input tensor (KServe v2; MLServer's NumPy codec, as its
    scikit-learn runtime decodes) becomes a float32 tensor and the module's single
    argument. It answers `output-0`, the tensor forward returned; where that is a batch
    of scores (two dimensions, two or more columns, floating point) it is taken for a
    classifier's and `predict`, the index of each row's highest score, comes first (what
    MLflow's /invocations returns, as for a scikit-learn classifier). A request that
    names `outputs` gets those. A payload the module refuses (a wrong shape, values
    that are not numbers) is the caller's error: 400 with the module's words."""

    async def load(self) -> bool:
        try:
            import torch
        except ImportError as missing:
            raise RuntimeError(f"{NO_TORCH} ({missing})") from missing
        # Inference only, never a graph for gradients (grad mode is per thread: predict
        # runs on the event loop's thread, where load ran; inference_mode there too).
        torch.set_grad_enabled(False)
        self._torch = torch
        self._module = torch.jit.load(await get_model_uri(self._settings), map_location="cpu")
        self._module.eval()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        torch = self._torch
        batch = self._decode(payload)
        try:
            with torch.inference_mode():
                answer = self._module(batch)
        except (torch.jit.Error, RuntimeError, ValueError, TypeError, IndexError) as exc:
            raise InferenceError(
                f"the model refused an input of shape {list(batch.shape)}: {_message(exc)}"
            ) from exc
        if not isinstance(answer, torch.Tensor):
            raise InferenceError(
                f"the model answered a {type(answer).__name__}; this runtime serves modules "
                "whose forward returns one tensor"
            )
        outputs = self._outputs(answer.detach().cpu().numpy())
        wanted = [o.name for o in payload.outputs or []] or list(outputs)
        unknown = [name for name in wanted if name not in outputs]
        if unknown:
            raise InferenceError(
                f"this model has no output {unknown[0]!r} (its outputs: {', '.join(outputs)})"
            )
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[
                self.encode(outputs[name], RequestOutput(name=name), default_codec=NumpyCodec)
                for name in wanted
            ],
        )

    def _decode(self, payload: InferenceRequest):
        """The request's one input as a float32 tensor; the caller's error if it is not
        one tensor of numbers."""
        try:
            decoded = self.decode_request(payload, default_codec=NumpyRequestCodec)
            values = np.asarray(decoded, dtype=np.float32)
        except (ValueError, TypeError) as exc:  # MLServer's own CodecError is a 400 already
            raise InferenceError(f"the input is no tensor of numbers: {exc}") from exc
        return self._torch.from_numpy(values)

    @staticmethod
    def _outputs(raw: np.ndarray) -> dict[str, np.ndarray]:
        if raw.ndim == 2 and raw.shape[1] > 1 and np.issubdtype(raw.dtype, np.floating):
            return {PREDICT_OUTPUT: raw.argmax(axis=1), RAW_OUTPUT: raw}
        return {RAW_OUTPUT: raw}


def _message(exc: Exception) -> str:
    """The module's words: a TorchScript error's last line ("builtins.ValueError: …")
    without the interpreter's traceback above it or the exception's name."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return re.sub(r"^(?:builtins\.)?[A-Za-z_.]*(?:Error|Exception): ", "", lines[-1])
