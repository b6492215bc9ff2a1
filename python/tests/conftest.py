import pytest

import step5_attention as s5
from kits import available_kits


def pytest_report_header(config):
    lines = [f"step5_attention {s5.__version__} (built with cuda: {s5.built_with_cuda})"]
    for name, kit, reason in available_kits():
        lines.append(f"  kit {name}: {'runs' if kit else 'skipped: ' + reason}")
    return lines


@pytest.fixture(params=[pytest.param(kit, id=name, marks=[] if kit else pytest.mark.skip(reason))
                        for name, kit, reason in available_kits()])
def kit(request):
    return request.param


@pytest.fixture
def backend(kit):
    return s5.Backend(kit.backend_kind, num_threads=2) if kit.backend_kind == "cpu" else \
        s5.Backend("cuda")
