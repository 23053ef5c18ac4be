"""Reads an AgentClinic MedQA file with AgentClinic's own loader classes and writes, per scenario, the sha256 of
each field its agents are given (canonical JSON), so a test can check medeval reads the same fields without
copying the cases into this repository.

Usage: python dump_scenarios.py AGENTCLINIC_SOURCE_DIR DATA_DIR {medqa|medqa_extended} OUT_JSON (see README.md).
agentclinic.py imports model clients (anthropic, openai, replicate, transformers) at its top; the loader classes
never use them, so they are stood in by empty modules here; nothing else of AgentClinic is replaced.
"""

import hashlib
import json
import os
import sys
import types
from pathlib import Path

source_dir, data_dir, variant, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
for name in ("anthropic", "openai", "replicate", "transformers"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["transformers"].pipeline = None  # only named by agentclinic.py's import line
sys.path.insert(0, str(source_dir))
import agentclinic  # noqa: E402  (AgentClinic's own module, found at run time)

loader_class = {"medqa": agentclinic.ScenarioLoaderMedQA, "medqa_extended": agentclinic.ScenarioLoaderMedQAExtended}
out = out.resolve()
os.chdir(data_dir)  # the loaders open their file by bare name
loader = loader_class[variant]()


def digest(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


rows = []
for index in range(loader.num_scenarios):
    scenario = loader.get_scenario(index)
    rows.append({"scenario": index, "patient_information": digest(scenario.patient_information()),
                 "examiner_information": digest(scenario.examiner_information()),
                 "exam_information": digest(scenario.exam_information()),
                 "diagnosis_information": digest(scenario.diagnosis_information())})
out.write_text(json.dumps({"loader": loader_class[variant].__name__, "scenarios": rows}, indent=1) + "\n",
               encoding="utf-8")
print(f"{loader.num_scenarios} scenarios")
