"""Gantry's MLServer runtimes, in the serving environment only (Gantry never imports
them): the local backend's replicas import this file (serve_model.py), and on
Kubernetes the endpoint's init container writes it beside the model's
model-settings.json, from where MLServer imports a model's own runtime
(endpoints/kubernetes.py).

Three runtimes, named by endpoints.local.served_file: scikit-learn models saved by MLflow
(`CheckedSKLearnModel`), TorchScript modules (`CheckedTorchScriptModel`) and other MLflow
models, through their python_function flavor (`CheckedMLflowModel`). Each answers a
payload the model refuses as the client's error: 400 with the model's words, where
MLServer would answer a bare 500. torch is imported only when a TorchScript model
loads, and MLflow only when the MLflow runtime is first asked for (module `__getattr__`:
MLServer imports a runtime by its dotted name), so a scikit-learn replica starts as
fast as before and an environment without torch never needs it.
"""

import functools
import re

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, NumpyRequestCodec, get_decoded, has_decoded
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
    "Kubernetes the image GANTRY_K8S_TORCH_IMAGE names must have torch."
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


# --- MLflow pyfunc ------------------------------------------------------------------------


def __getattr__(name: str):
    """CheckedMLflowModel, made on first use (and kept: `_checked_mlflow_model` is
    cached): importing mlserver_mlflow imports MLflow (about a second), which the other
    runtimes' replicas never need."""
    if name != "CheckedMLflowModel":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _checked_mlflow_model()


NO_MLFLOW = (
    "MLflow models need MLServer's MLflow runtime (mlserver-mlflow, with MLflow) in the "
    "serving environment, and it has none: it is in endpoints/runtime/requirements.txt "
    "(make install; on Kubernetes, the image platform/images/serving builds)."
)


@functools.cache
def _checked_mlflow_model() -> type:
    try:
        from mlflow.exceptions import MlflowException
        from mlserver_mlflow import MLflowRuntime
        from mlserver_mlflow.codecs import TensorDictCodec
    except ImportError as missing:
        raise ImportError(f"{NO_MLFLOW} ({missing})") from missing

    class CheckedMLflowModel(MLflowRuntime):
        """MLServer's MLflow runtime: an MLflow model loaded with
        `mlflow.pyfunc.load_model` (the serving environment's libraries; the model's own
        requirements.txt or conda.yaml are not installed), with three changes.

        A request with no content type, to a model with no signature to say one, reaches
        the model as MLflow's own server would give it `{"inputs": ...}`: one input as
        a NumPy array, several as a dict of them (MLServer's runtime would pass its
        request object). An answer that is a list or a pandas Series is sent as an
        array (MLServer encodes neither). A payload the model refuses (its signature's
        schema enforcement, or the model's own ValueError, TypeError...) is the caller's
        error: 400 with the model's words, where MLServer would answer a bare 500."""

        def decode_request(self, inference_request, default_codec=None):
            decoded = super().decode_request(inference_request, default_codec)
            if decoded is not inference_request:
                return decoded
            # No content type for the request: its inputs as NumPy arrays.
            tensors = {given.name: _tensor(given) for given in inference_request.inputs}
            return next(iter(tensors.values())) if len(tensors) == 1 else tensors

        async def predict(self, payload: InferenceRequest) -> InferenceResponse:
            data = self.decode_request(payload)
            params = payload.parameters.model_extra if payload.parameters else None
            try:
                answer = self._model.predict(data, params=params or None)
            except MlflowException as exc:
                raise InferenceError(_mlflow_message(exc.message)) from exc
            except (ValueError, TypeError, IndexError, KeyError) as exc:
                raise InferenceError(f"the model refused the input: {exc}") from exc
            return self.encode_response(_encodable(answer), default_codec=TensorDictCodec)

    CheckedMLflowModel.__qualname__ = "CheckedMLflowModel"  # as MLServer's logs name it
    return CheckedMLflowModel


def _tensor(request_input):
    """A request's input as a NumPy array, unless its own content type decoded it."""
    if has_decoded(request_input):
        return get_decoded(request_input)
    return NumpyCodec.decode_input(request_input)


def _encodable(answer):
    """The pyfunc's answer as MLServer's codecs take it: a NumPy array, a pandas
    DataFrame or a dict of arrays."""
    if isinstance(answer, dict):
        return {str(name): np.asarray(value) for name, value in answer.items()}
    if isinstance(answer, np.ndarray) or type(answer).__name__ == "DataFrame":
        return answer
    return np.asarray(answer)


def _mlflow_message(message: str) -> str:
    """MLflow's schema error without the input it prints whole ("Failed to enforce schema
    of data '[[...]]' with schema ..."), at most 1,000 characters."""
    message = re.sub(r"of data '.*' with schema", "of the input with schema", message, flags=re.S)
    return message if len(message) <= 1000 else message[:1000] + "…"
