"""Terrain for the quadruped tasks: flat ground, or a heightfield of slopes, stairs and
obstacles laid out as a grid of difficulty levels, with a curriculum that moves each env
between levels (the scheme of legged_gym's terrain curriculum).

The rough map has `levels` rows along x (level 0 easiest, each row harder) and one column per
kind of terrain along y; every cell is `cell_size` metres square with a flat platform at its
centre where robots start. The map is generated from `seed` (the same map for every env and
every run: it is the world, not a random draw of the episode). After each episode an env moves
up a level when its robot walked more than half a cell's width, and down when it fell or
covered less than half the distance its commands asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np
from embodied_ppo_envs import taskconfig as tc

KINDS = ("slope", "rough_slope", "stairs_up", "stairs_down", "obstacles")
BORDER = 30.0  # m of flat ground around the map: more than a 20 s episode walks at 1 m/s


class FlatTerrain:
    """The plane of the MJCF: height 0 everywhere, one level."""

    levels = 1
    initial_level = 0

    def first_level(self, rng: np.random.Generator) -> int:
        return 0

    def height_at(self, xy: np.ndarray, out: np.ndarray) -> None:
        out[...] = 0.0

    def spawn(self, level: int, rng: np.random.Generator) -> tuple[float, float, float]:
        return 0.0, 0.0, 0.0

    def next_level(
        self, level: int, walked: float, path: float, commanded: float, fell: bool
    ) -> int:
        return 0


@dataclass(frozen=True)
class RoughOptions:
    """Settings of the rough map (`terrain_options`)."""

    levels: int = 10
    cell_size: float = 6.0  # m
    resolution: float = 0.1  # m between height samples (legged_gym's horizontal scale)
    platform: float = 1.5  # m, side of the flat start area of each cell
    max_slope: float = 0.35  # rise over run at the hardest level (about 19 degrees)
    max_step: float = 0.13  # m, stair and obstacle height at the hardest level
    step_width: float = 0.3  # m
    roughness: float = 0.03  # m, amplitude of the noise of rough slopes (hardest level)
    curriculum: bool = True
    # An env's level at its first episode: one level, or [low, high] to draw each env's
    # uniformly from low..high (legged_gym's max_init_terrain_level).
    initial_level: int | tuple[int, int] = 0
    seed: int = 0

    @property
    def initial_range(self) -> tuple[int, int]:
        """The first levels' range, low and high included."""
        first = self.initial_level
        return (first, first) if isinstance(first, int) else first


def parse_options(value: Any) -> RoughOptions:
    given = tc.mapping(value, "terrain_options")
    base = RoughOptions()
    names = list(base.__dataclass_fields__)
    tc.unknown_names(given, names, "terrain_options")
    out: dict[str, Any] = {}
    for name in names:
        if name not in given:
            continue
        key = f"terrain_options.{name}"
        if name == "initial_level":
            out[name] = _initial_level(given[name], key)
        elif name in ("levels", "seed"):
            out[name] = tc.integer(given[name], key, low=0 if name != "levels" else 1)
        elif name == "curriculum":
            if not isinstance(given[name], bool):
                raise tc.TaskConfigError(key, f"got {given[name]!r}, expected true or false")
            out[name] = given[name]
        else:
            out[name] = tc.number(given[name], key, low=0.0)
    options = RoughOptions(**{**base.__dict__, **out})
    top = options.initial_range[1]
    if top >= options.levels:
        raise tc.TaskConfigError(
            "terrain_options.initial_level",
            f"got {top}, expected a level below levels ({options.levels})",
        )
    if options.resolution <= 0 or options.cell_size < 2 * options.resolution:
        raise tc.TaskConfigError("terrain_options.resolution", "must be > 0 and < cell_size / 2")
    return options


def _initial_level(value: Any, key: str) -> int | tuple[int, int]:
    """A level (>= 0), or [low, high] with 0 <= low <= high."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise tc.TaskConfigError(key, f"got {value!r}, expected a level or [low, high]")
        low, high = (tc.integer(v, key, low=0) for v in value)
        if low > high:
            raise tc.TaskConfigError(key, f"got {list(value)!r}, expected low <= high")
        return (low, high) if low < high else low
    return tc.integer(value, key, low=0)


def _cell(kind: str, difficulty: float, o: RoughOptions, rng: np.random.Generator) -> np.ndarray:
    """Heights (n, n) of one cell of `kind` at `difficulty` in [0, 1]; 0 at its border."""
    n = round(o.cell_size / o.resolution)
    c = (np.arange(n) + 0.5) * o.resolution - o.cell_size / 2  # sample centres, m
    # Distance from the central platform, along the larger axis (square rings).
    ring = np.maximum(np.abs(c)[:, None], np.abs(c)[None, :]) - o.platform / 2
    ring = np.clip(ring, 0.0, None)
    edge = o.cell_size / 2 - o.platform / 2
    step = 0.02 + (o.max_step - 0.02) * difficulty
    if kind in ("slope", "rough_slope"):
        # A pyramid, the platform on top; every other cell a hollow (going down first).
        slope = o.max_slope * difficulty
        h = slope * (edge - ring)
        if kind == "rough_slope":
            noise = rng.uniform(-1.0, 1.0, (n, n)) * (0.01 + o.roughness * difficulty)
            h = h + noise
        return h
    if kind in ("stairs_up", "stairs_down"):
        # Square rings of steps: the platform is the top (stairs_up) or bottom step.
        steps = np.floor((edge - ring) / o.step_width)
        h = steps * step
        return h if kind == "stairs_up" else -h
    # Obstacles: random blocks up or down, 0.4-1 m wide, around the platform.
    h = np.zeros((n, n))
    for _ in range(int(12 * o.cell_size**2 / 36)):
        w = rng.uniform(0.4, 1.0, 2)
        x0, y0 = rng.uniform(-o.cell_size / 2, o.cell_size / 2, 2)
        inside = (np.abs(c[:, None] - x0) < w[0] / 2) & (np.abs(c[None, :] - y0) < w[1] / 2)
        h[inside] = rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0) * step
    h[ring <= 0.0] = 0.0
    return h


class RoughTerrain:
    """The heightfield map of the rough task (see the module docstring)."""

    def __init__(self, spec: mujoco.MjSpec, options: RoughOptions) -> None:
        o = self.options = options
        self.levels = o.levels
        self.initial_level, self._initial_high = o.initial_range
        rng = np.random.default_rng(o.seed)
        cells = [
            [_cell(kind, level / max(1, o.levels - 1), o, rng) for kind in KINDS]
            for level in range(o.levels)
        ]
        # Rows of the map are y (kinds), columns x (levels): heights[y, x], MuJoCo's layout.
        self.heights = np.concatenate(
            [
                np.concatenate([cells[lv][k] for lv in range(o.levels)], axis=0)
                for k in range(len(KINDS))
            ],
            axis=1,
        ).T.copy()
        self.ny, self.nx = self.heights.shape
        self.size_x, self.size_y = self.nx * o.resolution, self.ny * o.resolution
        low, high = float(self.heights.min()), float(self.heights.max())
        self.low = low
        self.elevation = max(high - low, 1e-3)
        # The map is centred on the world origin; its first cell starts at (-size/2, -size/2).
        self.x0, self.y0 = -self.size_x / 2, -self.size_y / 2
        spec.add_hfield(
            name="terrain",
            nrow=self.ny,
            ncol=self.nx,
            size=[self.size_x / 2, self.size_y / 2, self.elevation, 0.1],
            # MuJoCo keeps heights normalized to [0, 1] and scales them by the elevation.
            userdata=((self.heights - low) / self.elevation).reshape(-1).tolist(),
        )
        floor = spec.geom("floor")
        floor.type = mujoco.mjtGeom.mjGEOM_HFIELD
        floor.hfieldname = "terrain"
        floor.pos = [0.0, 0.0, low]
        # Flat ground around the map (its cells meet their neighbours at height 0), so a robot
        # that walks off the map keeps walking instead of falling into the void.
        half_x, half_y, margin = self.size_x / 2, self.size_y / 2, BORDER
        for name, cx, cy, sx, sy in (
            ("border_x+", half_x + margin / 2, 0.0, margin / 2, half_y + margin),
            ("border_x-", -half_x - margin / 2, 0.0, margin / 2, half_y + margin),
            ("border_y+", 0.0, half_y + margin / 2, half_x, margin / 2),
            ("border_y-", 0.0, -half_y - margin / 2, half_x, margin / 2),
        ):
            spec.worldbody.add_geom(
                name=name,
                type=mujoco.mjtGeom.mjGEOM_BOX,
                size=[sx, sy, 0.5],
                pos=[cx, cy, -0.5],
                contype=1,
                conaffinity=0,
                material="ground",
            )

    def height_at(self, xy: np.ndarray, out: np.ndarray) -> None:
        """Ground heights at points `xy` (..., 2), bilinear between samples, into `out` (...);
        0 on the flat border around the map."""
        # MuJoCo spreads nx samples evenly over the map's width, the first and last on its edges.
        fx = (xy[..., 0] - self.x0) * ((self.nx - 1) / self.size_x)
        fy = (xy[..., 1] - self.y0) * ((self.ny - 1) / self.size_y)
        outside = (fx < 0) | (fx > self.nx - 1) | (fy < 0) | (fy > self.ny - 1)
        fx = np.clip(fx, 0.0, self.nx - 1.001)
        fy = np.clip(fy, 0.0, self.ny - 1.001)
        ix, iy = fx.astype(np.int64), fy.astype(np.int64)
        tx, ty = fx - ix, fy - iy
        h = self.heights
        out[...] = (
            h[iy, ix] * (1 - tx) * (1 - ty)
            + h[iy, ix + 1] * tx * (1 - ty)
            + h[iy + 1, ix] * (1 - tx) * ty
            + h[iy + 1, ix + 1] * tx * ty
        )
        out[outside] = 0.0

    def first_level(self, rng: np.random.Generator) -> int:
        """An env's level at its first episode: `initial_level`, or a draw from its range (from
        `rng` only then, so that a single level leaves every other draw as it was)."""
        if self._initial_high == self.initial_level:
            return self.initial_level
        return int(rng.integers(self.initial_level, self._initial_high + 1))

    def spawn(self, level: int, rng: np.random.Generator) -> tuple[float, float, float]:
        """A start point on the platform of a random cell of `level`."""
        o = self.options
        kind = int(rng.integers(len(KINDS)))
        jitter = rng.uniform(-0.25, 0.25, 2) * o.platform
        x = self.x0 + (level + 0.5) * o.cell_size + jitter[0]
        y = self.y0 + (kind + 0.5) * o.cell_size + jitter[1]
        z = np.zeros(1)
        self.height_at(np.array([[x, y]]), z)
        return float(x), float(y), float(z[0])

    def next_level(
        self, level: int, walked: float, path: float, commanded: float, fell: bool
    ) -> int:
        """The level after an episode: up after ending more than half a cell from the start
        (`walked`, m), down after a fall or a `path` (m travelled) shorter than half the
        distance the commands asked for (commands that turn back make the straight-line
        distance a poor measure of tracking, so the path is used)."""
        if not self.options.curriculum:
            return level
        if fell or path < 0.5 * commanded:
            return max(0, level - 1)
        if walked > self.options.cell_size / 2:
            return min(self.levels - 1, level + 1)
        return level


def make_terrain(spec: mujoco.MjSpec, options: Any) -> RoughTerrain:
    """The rough terrain, added to `spec` (a heightfield in place of the floor plane)."""
    return RoughTerrain(spec, parse_options(options))
