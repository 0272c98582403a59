"""The seeded catalog: Gantry's own images, built from platform/images/ (plain data, so the
data migration and the tests share it). References point at a registry on the Gantry host
(`localhost:5000`); a lab that pushes them elsewhere edits the references in the admin."""

CATALOG = [
    {
        "name": "PyTorch 2.7 (CUDA 12.8)",
        "reference": "localhost:5000/gantry/pytorch:2.7.1-cuda12.8",
        "framework": "pytorch",
        "framework_version": "2.7.1",
        "cuda_version": "12.8",
        "python_version": "3.11",
        "legacy": False,
        "description": "PyTorch with CUDA 12.8 and cuDNN 9, torchvision, torchaudio and the "
        "Gantry executor. Dockerfile: platform/images/pytorch/.",
    },
    {
        "name": "TensorFlow 2.19 (CUDA 12.5)",
        "reference": "localhost:5000/gantry/tensorflow:2.19.0-gpu",
        "framework": "tensorflow",
        "framework_version": "2.19.0",
        "cuda_version": "12.5",
        "python_version": "3.11",
        "legacy": False,
        "description": "TensorFlow with GPU support (Keras 3) and the Gantry executor. "
        "Dockerfile: platform/images/tensorflow/.",
    },
    {
        "name": "MXNet 1.9.1 (legacy, CUDA 11.7)",
        "reference": "localhost:5000/gantry/mxnet:1.9.1-cuda11.7",
        "framework": "mxnet",
        "framework_version": "1.9.1",
        "cuda_version": "11.7",
        "python_version": "3.10",
        "legacy": True,
        "description": "Apache MXNet was retired in 2023; 1.9.1 is its last release. Kept so "
        "old models can still be trained and served; start new work on PyTorch or TensorFlow. "
        "Dockerfile: platform/images/mxnet/.",
    },
]
