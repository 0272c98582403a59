"""MLflow's /invocations answer, made by the gateway from the runtime's KServe v2 answer
(the serving runs are in test_serving*.py)."""

import json

from endpoints import gateway


def untranslated(output: dict):
    return json.loads(gateway._untranslate(json.dumps({"outputs": [output]}).encode()))


def test_invocations_predictions_are_nested_as_the_first_outputs_shape_says():
    # A class per row: MLServer sends a 1-D answer as [n, 1]; MLflow answers a flat list.
    assert untranslated({"shape": [3, 1], "data": [7, 1, 4]}) == {"predictions": [7, 1, 4]}
    assert untranslated({"shape": [3], "data": [7, 1, 4]}) == {"predictions": [7, 1, 4]}
    # A pyfunc's class probabilities: a row per input row, as `mlflow models serve` answers.
    probabilities = {"shape": [2, 3], "data": [0.1, 0.2, 0.7, 0.5, 0.4, 0.1]}
    assert untranslated(probabilities) == {"predictions": [[0.1, 0.2, 0.7], [0.5, 0.4, 0.1]]}
    images = {"shape": [1, 2, 2, 1], "data": [1, 2, 3, 4]}
    assert untranslated(images) == {"predictions": [[[1, 2], [3, 4]]]}
    # No shape, or one its values do not fill: the values as they came.
    assert untranslated({"data": [3]}) == {"predictions": [3]}
    assert untranslated({"shape": [2, 2], "data": [1, 2, 3]}) == {"predictions": [1, 2, 3]}
