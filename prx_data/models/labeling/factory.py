"""The classifier a config names (:class:`~prx_data.models.inference.factory.BackendFactory`).
For ``vllm`` the classifier also streams a Ray Dataset (``run_dataset``), the path real runs take."""

from __future__ import annotations

from prx_data.models.inference.factory import BackendFactory
from prx_data.models.labeling.base import BaseClassifier
from prx_data.models.labeling.config import (
    ClassifierConfig,
    FusedClassifierConfig,
    MiniLMClassifierConfig,
    OpenAIClassifierConfig,
    VLLMClassifierConfig,
)

CLASSIFIERS: BackendFactory[ClassifierConfig, BaseClassifier] = BackendFactory(
    "classifier",
    ClassifierConfig,
    __package__,
    {
        MiniLMClassifierConfig: ".minilm:MiniLMClassifier",
        OpenAIClassifierConfig: ".openai_backend:OpenAIClassifier",
        VLLMClassifierConfig: ".vllm_ray:VLLMClassifier",
    },
    # Built by the label stage, which knows the captioner's label version (labeling.fused).
    refused={
        FusedClassifierConfig: "the 'fused' label backend runs no model: the captioner writes the labels (VLLMCaptionerConfig.fused_label)"
    },
)
parse_classifier_config = CLASSIFIERS.parse
make_classifier = CLASSIFIERS.make
