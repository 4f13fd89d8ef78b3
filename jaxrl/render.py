"""`jaxrl render`: a trained policy's episodes as an animation (GIF, or MP4 with ffmpeg) and a contact sheet.

The latest checkpoint of one seed of a run folder is restored (read only), its evaluation policy
(`base.evaluation_policy`, deterministic or stochastic; a recurrent one carries its memory) plays episodes of
the run's environment from reset to their end on evaluation keys (`--seed`, disjoint from training's), and each
step is drawn by the environment's own renderer: gymnax's (`gymnax.visualize.Visualizer`: classic control and
MinAtar), or a suite's (`renderer` of its adapter in `jaxrl.envs.suites`: Navix, Craftax, XLand-MiniGrid,
Jumanji, each state as it is reached; `episode_renderer`: Brax and MuJoCo Playground, the episode's states at its
end, through MuJoCo's OpenGL renderer, which draws off screen with `MUJOCO_GL=egl` or `osmesa`). The env is
stepped without its auto-reset, so the last frame of an episode is its terminal state. Frames carry the step, the
reward and the return so far; the contact sheet is `SHEET_FRAMES` evenly spaced frames in one PNG. An episode is
drawn for at most `max_steps` steps (default: the env's time limit; Brax and Playground: `MUJOCO_STEP_CAP`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.render_request import check_out, check_seed_index
from jaxrl.rollout import RecurrentAct

RENDERABLE = (
    "CartPole-v1",
    "Acrobot-v1",
    "Pendulum-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "SpaceInvaders-MinAtar",
)
# suites whose adapters draw through the suite's renderer; the MuJoCo ones through MuJoCo's OpenGL renderer
SUITES = ("navix", "craftax", "xminigrid", "jumanji", "brax", "playground")
MUJOCO_SUITES = ("brax", "playground")
SUITE_STEP_CAP = 10_000  # the longest suite episode played when the suite sets no time limit
MUJOCO_STEP_CAP = 200  # the longest Brax or Playground episode drawn by default (their limits are ~1000 steps)
MUJOCO_FRAME = (240, 360)  # height, width of a Brax or Playground frame (MuJoCo's renderer)
SHEET_FRAMES = 8
CAPTION_WIDTH = 360  # suite frames narrower than this are enlarged (nearest neighbour) to fit their caption
OFFSCREEN = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy", "PYGAME_HIDE_SUPPORT_PROMPT": "1"}


def _no_renderer(env_id: str) -> ValueError:
    suites = ", ".join(f"{s}:" for s in SUITES)
    return ValueError(f"{env_id}: no renderer; jaxrl render draws {', '.join(RENDERABLE)} and the {suites} envs.")


def check_renderable(env_id: str) -> None:
    """Raises a one-line ValueError for an env jaxrl render cannot draw (or a suite whose extra is missing)."""
    if ":" not in env_id:
        _gymnax_env(env_id)
        return
    from jaxrl.envs import suites

    prefix = env_id.partition(":")[0]
    if prefix not in SUITES:
        raise _no_renderer(env_id)
    suites.check_id(env_id)
    if prefix in MUJOCO_SUITES:
        check_mujoco_gl(env_id)


def prefer_offscreen_gl() -> None:
    """Sets MUJOCO_GL=egl on a Linux machine without a display where libEGL is present and MUJOCO_GL is unset, so
    that MuJoCo (Brax, Playground) draws off screen. MuJoCo reads the variable when first imported: call this
    before."""
    import ctypes.util

    headless = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if headless and sys.platform == "linux" and "MUJOCO_GL" not in os.environ and ctypes.util.find_library("EGL"):
        os.environ["MUJOCO_GL"] = "egl"


def check_mujoco_gl(env_id: str) -> None:
    """Raises a one-line ValueError naming the fix when MuJoCo's OpenGL renderer cannot start (no display and no
    off-screen backend chosen, or the chosen one missing)."""
    backend = os.environ.get("MUJOCO_GL") or "unset"
    try:
        with warnings.catch_warnings():  # GLFW warns of the missing display before failing
            warnings.simplefilter("ignore")
            import mujoco

            mujoco.Renderer(mujoco.MjModel.from_xml_string("<mujoco/>"), 8, 8).close()
    except Exception as error:  # mujoco.FatalError, or an OpenGL library that fails to load
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise ValueError(
            f"{env_id}: MuJoCo's renderer cannot start (MUJOCO_GL={backend}: {reason}); set MUJOCO_GL=egl (or "
            "MUJOCO_GL=osmesa) to draw off screen, e.g. MUJOCO_GL=egl jaxrl render RUN."
        ) from error


def _gymnax_env(env_id: str):
    if env_id not in RENDERABLE:
        raise _no_renderer(env_id)
    # classic control draws through gymnasium's pygame renderer, off screen: no window, no sound device
    for name, value in OFFSCREEN.items():
        os.environ.setdefault(name, value)
    if "MinAtar" not in env_id:
        try:
            import pygame  # noqa: F401
        except ImportError as error:
            raise ValueError(f"{env_id} draws through pygame, which is missing: pip install 'jaxrl[render]'") from error
    from jaxrl.envs.gymnax import import_gymnax

    return import_gymnax().make(env_id)


def play_arrays(env_id: str, act, key: jax.Array, normalize=None):
    """Traceable: one episode stepped for the env's whole time limit without auto-reset, frozen after its end:
    (reset state, states [limit], rewards [limit], ended-before [limit])."""
    env, params = _gymnax_env(env_id)
    normalize = normalize or (lambda obs: obs)
    space = env.action_space(params)
    continuous = not hasattr(space, "n")
    limit = int(params.max_steps_in_episode)
    reset_key, run_key = jax.random.split(key)
    obs, state = env.reset(reset_key, params)
    memory = act.initial(1) if isinstance(act, RecurrentAct) else None

    def step(carry, keys):
        obs, state, done, memory, first = carry
        batch = normalize(jnp.asarray(obs, jnp.float32)[None])
        if memory is None:
            action = act(batch, keys[0])
        else:
            memory, action = act.step(memory, batch, first[None], keys[0])
        action = jnp.clip(action[0], space.low, space.high) if continuous else action[0]
        next_obs, next_state, reward, terminated, _ = env.step_env(keys[1], state, action, params)
        ended = terminated | env.is_truncated(next_state, params)
        keep = lambda new, old: jnp.where(done, old, new)  # noqa: E731  (after the end: frozen)
        next_state = jax.tree.map(keep, next_state, state)
        carry = (keep(next_obs, obs), next_state, done | ended, memory, jnp.bool_(False))
        return carry, (next_state, jnp.where(done, 0.0, reward), done)

    keys = jax.random.split(run_key, (limit, 2))
    carry = (obs, state, jnp.bool_(False), memory, jnp.bool_(True))
    _, (states, rewards, was_done) = jax.lax.scan(step, carry, keys)
    return state, states, rewards, was_done


def unstack(first, states, rewards, was_done, max_steps: int | None = None) -> tuple[list, np.ndarray]:
    """The host side of `play_arrays`: the states up to the episode's end, or its first `max_steps` steps
    ([T + 1]), and its rewards [T]."""
    done = np.asarray(was_done)
    length = int(np.argmax(done)) if done.any() else len(done)
    length = length if max_steps is None else min(length, max_steps)
    sequence = [first] + [jax.tree.map(lambda x, t=t: x[t], states) for t in range(length)]
    return sequence, np.asarray(rewards[:length], np.float64)


def play(env_id: str, act, key: jax.Array, normalize=None) -> tuple[list, np.ndarray]:
    """One episode of `env_id` with `act(obs [1, ...], key) -> action [1, ...]` (or a `RecurrentAct`): the
    gymnax states from reset to the terminal or truncated one ([T + 1]) and the rewards [T]."""
    return unstack(*jax.jit(lambda k: play_arrays(env_id, act, k, normalize))(key))


def draw(env_id: str, states: list, rewards: np.ndarray, progress: bool = False) -> list[np.ndarray]:
    """The frames [H, W, 3] uint8 of one episode, titled with its step, last reward and return so far."""
    import matplotlib

    matplotlib.use("Agg")
    from gymnax.visualize import Visualizer
    from tqdm.auto import tqdm

    env, params = _gymnax_env(env_id)
    returns = np.concatenate([[0.0], np.cumsum(rewards)])
    visualizer = Visualizer(env, params, states, returns)
    visualizer.init()
    frames = []
    for t in tqdm(range(len(states)), desc="frames", disable=not progress, leave=False):
        visualizer.update(t)
        reward = rewards[t - 1] if t else 0.0
        visualizer.ax.set_title(f"{env_id}  step {t}  reward {reward:+.2f}  return {returns[t]:.2f}", fontsize=11)
        visualizer.fig.canvas.draw()
        frames.append(np.asarray(visualizer.fig.canvas.buffer_rgba())[..., :3].copy())
    import matplotlib.pyplot as plt

    plt.close(visualizer.fig)
    return frames


def caption(image: np.ndarray, title: str, line: str) -> np.ndarray:
    """`image` [H, W, 3] uint8, enlarged by a whole factor to at least `CAPTION_WIDTH` pixels wide, under two lines
    of text (`title`, then `line`) on white."""
    from PIL import Image, ImageDraw, ImageFont

    factor = max(1, -(-CAPTION_WIDTH // image.shape[1]))
    picture = Image.fromarray(image).resize((image.shape[1] * factor, image.shape[0] * factor), Image.NEAREST)
    try:
        font = ImageFont.load_default(size=13)
    except TypeError:  # Pillow < 10.1: the fixed bitmap font
        font = ImageFont.load_default()
    framed = Image.new("RGB", (picture.width, picture.height + 36), "white")
    framed.paste(picture, (0, 36))
    text = ImageDraw.Draw(framed)
    text.text((4, 2), title, fill="black", font=font)
    text.text((4, 18), line, fill="black", font=font)
    return np.asarray(framed)


def suite_player(env_id: str, act, normalize=None):
    """`episode(key, max_steps=None, progress=False) -> (frames, rewards)`: one episode of the suite env `env_id`
    (`suite:Name`) with `act(obs [1, ...], key) -> action [1, ...]` (or a `RecurrentAct`), drawn by the suite's
    renderer (step by step, or for Brax and Playground the whole episode at its end): the captioned frames from
    reset to the terminal or truncated state ([T + 1]) and the rewards [T]. An episode stops after `max_steps`
    steps (default `episode.max_steps`: the env's time limit, or `SUITE_STEP_CAP`; for Brax and Playground at
    most `MUJOCO_STEP_CAP`); `episode.time_limit` is the env's own. The env, the renderer and the step are
    built once, for every episode."""
    from tqdm.auto import tqdm

    from jaxrl.envs import suites

    check_renderable(env_id)
    prefix = env_id.partition(":")[0]
    env = suites.make(env_id, 1)
    adapter = suites.adapter(prefix)
    if prefix in MUJOCO_SUITES:  # the episode's states kept (on the host) and drawn at its end by one renderer
        draw_states = adapter.episode_renderer(env.suite_env)
        draw_state = None
    else:
        draw_state = adapter.renderer(env.suite_env)
    spec = env.spec
    normalize = normalize or (lambda obs: obs)
    time_limit = env.params.max_steps_in_episode or SUITE_STEP_CAP
    default_steps = min(time_limit, MUJOCO_STEP_CAP) if prefix in MUJOCO_SUITES else time_limit
    reset = jax.jit(env.reset_fn)

    @jax.jit
    def step(obs, state, memory, first, key):
        act_key, env_key = jax.random.split(key)
        batch = normalize(jnp.asarray(obs, jnp.float32)[None])
        if memory is None:
            action = act(batch, act_key)
        else:
            memory, action = act.step(memory, batch, first[None], act_key)
        action = action[0] if spec.discrete else jnp.clip(action[0], spec.action_low, spec.action_high)
        obs, state, reward, terminated, truncated = env.step_fn(env_key, state, action)
        return obs, state, memory, reward, terminated | truncated

    def episode(key: jax.Array, max_steps: int | None = None, progress: bool = False):
        reset_key, run_key = jax.random.split(key)
        obs, state = reset(reset_key)
        memory = act.initial(1) if isinstance(act, RecurrentAct) else None
        rewards, ret, lines, kept = [], 0.0, ["step 0  reward +0.00  return 0.00"], []

        def keep(state):  # a picture now, or (Brax, Playground) the state, drawn at the end
            kept.append(jax.device_get(state) if draw_state is None else draw_state(state))

        keep(state)
        keys = jax.random.split(run_key, max_steps or default_steps)
        for t, step_key in enumerate(tqdm(keys, desc="steps", disable=not progress, leave=False)):
            obs, state, memory, reward, ended = step(obs, state, memory, jnp.bool_(t == 0), step_key)
            rewards.append(float(reward))
            ret += rewards[-1]
            lines.append(f"step {t + 1}  reward {rewards[-1]:+.2f}  return {ret:.2f}")
            keep(state)
            if bool(ended):
                break
        pictures = kept if draw_state is not None else draw_states(kept, *MUJOCO_FRAME)
        frames = [caption(p, env_id, line) for p, line in zip(pictures, lines, strict=True)]
        return frames, np.asarray(rewards, np.float64)

    episode.max_steps, episode.time_limit = default_steps, time_limit
    return episode


def write_animation(frames: list[np.ndarray], out: Path, fps: int) -> Path:
    """A GIF (Pillow), or an MP4 through ffmpeg when it is on PATH."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".gif":
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        images[0].save(out, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
        return out
    if out.suffix.lower() != ".mp4":
        raise ValueError(f"--out {out}: write a .gif or an .mp4.")
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise ValueError(f"--out {out}: an .mp4 needs ffmpeg on PATH (apt install ffmpeg); or write a .gif.")
    height, width, _ = frames[0].shape
    command = [ffmpeg, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}"]
    command += ["-r", str(fps), "-i", "-", "-pix_fmt", "yuv420p", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", str(out)]
    subprocess.run(command, input=b"".join(f.tobytes() for f in frames), check=True)
    return out


def write_sheet(frames: list[np.ndarray], out: Path, count: int = SHEET_FRAMES) -> Path:
    """`count` evenly spaced frames (the first and the last included) side by side in rows of 4, as a PNG."""
    from PIL import Image

    picks = np.unique(np.linspace(0, len(frames) - 1, min(count, len(frames))).round().astype(int))
    h, w, _ = frames[0].shape
    columns = min(4, len(picks))
    rows = -(-len(picks) // columns)
    sheet = Image.new("RGB", (columns * w, rows * h), "white")
    for i, t in enumerate(picks):
        sheet.paste(Image.fromarray(frames[t]), ((i % columns) * w, (i // columns) * h))
    sheet = sheet.resize((columns * w // 2, rows * h // 2))
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return out


def render_run(
    run_dir: str | Path,
    out: str | Path,
    seed_index: int = 0,
    episodes: int = 1,
    deterministic: bool = True,
    key_seed: int = 12345,
    fps: int = 20,
    progress: bool = False,
    max_steps: int | None = None,
) -> list[str]:
    """`jaxrl render RUN --out FILE`: plays `episodes` episodes of the run's seed `seed_index` (keys from
    `key_seed`), each drawn for at most `max_steps` steps (default: the env's time limit; Brax and Playground:
    `MUJOCO_STEP_CAP`), and writes the animation `out` and its contact sheet `<out stem>.png`. Returns the report
    lines."""
    from jaxrl.algos import base
    from jaxrl.run.evaluate import restore_latest

    if episodes < 1:
        raise ValueError(f"--episodes {episodes}: need at least one episode.")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"--max-steps {max_steps}: need at least one step.")
    out = Path(out)
    check_out(out)
    saved, module, config, iteration, states = restore_latest(Path(run_dir))
    check_renderable(config.env)  # one line for an env without a renderer, before playing
    check_seed_index(seed_index, int(jax.tree.leaves(states)[0].shape[0]))
    state = jax.tree.map(lambda x: x[seed_index], states)
    act, normalize = base.evaluation_policy(config, state, deterministic=deterministic, algo=module)
    frames, lines = [], [f"{run_dir}: {saved['algo']} on {config.env}, seed {seed_index}, iteration {iteration}"]
    progress = progress and sys.stderr.isatty()
    if ":" in config.env:  # built and compiled once, for every episode
        suite_episode = suite_player(config.env, act, normalize)
        cap, time_limit = max_steps or suite_episode.max_steps, suite_episode.time_limit
    else:
        episode = jax.jit(lambda key: play_arrays(config.env, act, key, normalize))
        time_limit = int(_gymnax_env(config.env)[1].max_steps_in_episode)
        cap = max_steps or time_limit
    for e, key in enumerate(jax.random.split(jax.random.key(key_seed), episodes)):
        if ":" in config.env:
            drawn, rewards = suite_episode(key, max_steps=cap, progress=progress)
            frames += drawn
        else:
            sequence, rewards = unstack(*episode(key), max_steps=cap)
            frames += draw(config.env, sequence, rewards, progress)
        stopped = f" (drawn up to --max-steps {cap})" if len(rewards) == cap < time_limit else ""
        lines.append(f"episode {e}: {len(rewards)} steps{stopped}, return {rewards.sum():.2f}")
    animation = write_animation(frames, out, fps)
    sheet = write_sheet(frames, out.with_suffix(".png"))
    lines += [f"animation         {animation}  ({len(frames)} frames)", f"contact sheet     {sheet}"]
    return lines
