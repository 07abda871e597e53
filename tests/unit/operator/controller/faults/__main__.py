"""Print the fault explorer's matrix (`python -m tests.unit.operator.controller.faults`), the
table `docs/faults.md` holds."""

from __future__ import annotations

from tests.unit.operator.controller.faults.explorer import explore
from tests.unit.operator.controller.faults.scenarios import SCENARIOS
from tests.unit.operator.controller.faults.sim import Fault


def main() -> None:
    print("| scenario | calls | cases | differing |")
    print("| --- | ---: | ---: | ---: |")
    total = [0, 0, 0]
    for scenario in SCENARIOS:
        cases, found = explore(scenario)
        calls = cases // len(Fault.KINDS)
        print(f"| `{scenario.name}` | {calls} | {cases} | {len(found)} |")
        for i, n in enumerate((calls, cases, len(found))):
            total[i] += n
    print(f"| all {len(SCENARIOS)} | {total[0]} | {total[1]} | {total[2]} |")


if __name__ == "__main__":
    main()
