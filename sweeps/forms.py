from django import forms

from snapshots.forms import CodeSnapshotField

EXAMPLE = """name: digits
objective: {metric: val_accuracy, direction: maximize}
template:
  command: python examples/train_digits.py
  parameters: {epochs: 6}
  cpus: 1
  memory_mb: 1024
parameters:
  lr: {type: loguniform, low: 0.0003, high: 0.3}
  batch-size: {type: categorical, choices: [32, 64, 128]}
sampler: tpe
pruner: {type: asha, min_resource: 1, reduction_factor: 2}
budget: {trials: 8, gpu_hours: 1}
parallelism: 2
"""


class SweepForm(forms.Form):
    code_snapshot = CodeSnapshotField(
        help_text="Staged into every trial's working directory, over any code_snapshot the "
        "sweep names. The sample runs examples/train_digits.py: upload the examples/ folder "
        "of Gantry's repository (it arrives as examples/), or pick an earlier upload of it."
    )
    source = forms.CharField(
        label="Sweep (YAML or JSON)",
        widget=forms.Textarea(attrs={"rows": 20, "class": "font-monospace", "spellcheck": "false"}),
        initial=EXAMPLE,
        help_text=(
            "A job template, the search space (uniform, loguniform, int, categorical; "
            "`when:` for conditional parameters), the objective metric, sampler "
            "(random, grid, tpe, cmaes), pruner (none, median, asha, hyperband), budget "
            "(trials, gpu_hours, wall_minutes) and parallelism. Each trial gets its "
            "parameters as --name value and GANTRY_PARAM_<NAME>."
        ),
    )

    def __init__(self, *args, user=None, project=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["code_snapshot"].offer(user, project)
