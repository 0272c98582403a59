"""Gantry's MLServer runtime for scikit-learn models, in the serving environment only
(Gantry never imports it): the local backend's replicas import it (serve_model.py), and
on Kubernetes the endpoint's init container writes this file beside the model's
model-settings.json, from where MLServer imports a model's own runtime
(endpoints/kubernetes.py)."""

from mlserver.errors import InferenceError
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
