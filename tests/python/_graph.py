"""Import circles of a module graph, shared by the Python package's and the
Rust crates' module-graph tests."""

from __future__ import annotations


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Every import circle of ``graph`` (module -> modules it uses), each
    as ``a -> b -> a``, sorted."""
    found: list[str] = []

    def walk(m: str, path: list[str], done: set[str]) -> None:
        for t in sorted(graph.get(m, set())):
            if t in path:
                found.append(" -> ".join([*path[path.index(t) :], t]))
            elif t not in done:
                done.add(t)
                walk(t, [*path, t], done)

    for m in sorted(graph):
        walk(m, [m], set())
    return sorted(set(found))
