"""`jaxrl render`: episodes played without auto-reset end on their terminal state, frames match the episode,
animations and contact sheets are written, checkpoints are only read, and errors are one line."""

import hashlib
import json
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from jaxrl import render
from jaxrl.envs import suites
from jaxrl.envs.gymnax import import_gymnax

gymnax = import_gymnax()


def uniform(n):
    return lambda obs, key: jax.random.randint(key, (obs.shape[0],), 0, n)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Breakout-MinAtar"])
def test_a_played_episode_ends_on_its_terminal_state(env_id):
    env, params = gymnax.make(env_id)
    states, rewards = render.play(env_id, uniform(env.num_actions), jax.random.key(3))
    assert len(states) == len(rewards) + 1 and 1 <= len(rewards) < params.max_steps_in_episode
    terminal = [bool(env.is_terminal(s, params)) for s in states]
    assert terminal[-1] and not any(terminal[:-1])  # the episode stops at its first terminal state, and shows it
    frames = render.draw(env_id, states[:3] + states[-1:], rewards[:2].tolist() + rewards[-1:].tolist())
    assert len(frames) == 4 and frames[0].dtype == np.uint8 and frames[0].shape[-1] == 3
    assert not np.array_equal(frames[0], frames[-1])


def test_gif_and_contact_sheet(tmp_path):
    frames = [np.full((40, 60, 3), 10 * i, np.uint8) for i in range(13)]
    gif = render.write_animation(frames, tmp_path / "a.gif", fps=10)
    with Image.open(gif) as image:
        assert image.n_frames == 13
    sheet = render.write_sheet(frames, tmp_path / "a.png")
    with Image.open(sheet) as image:
        assert image.size == (4 * 60 // 2, 2 * 40 // 2)  # 8 frames in rows of 4, at half size
    with pytest.raises(ValueError, match="write a .gif or an .mp4"):
        render.write_animation(frames, tmp_path / "a.avi", fps=10)
    if shutil.which("ffmpeg") is None:
        with pytest.raises(ValueError, match="needs ffmpeg"):
            render.write_animation(frames, tmp_path / "a.mp4", fps=10)


def constant(action, size=None):
    shape = () if size is None else (size,)  # a discrete action, or a box action of `size` entries
    return lambda obs, key: jax.numpy.full((obs.shape[0], *shape), action)


# each action changes the picture every step: a turn (Navix, XLand-MiniGrid), a move (Jumanji's snake always moves;
# Craftax's player moves left or turns to face left; Brax's and Playground's carts are pushed)
SUITE_EPISODES = [  # (id, action, size of a box action or None for a discrete one)
    ("navix:Navix-Empty-5x5-v0", 1, None),
    ("xminigrid:MiniGrid-Empty-6x6", 1, None),
    ("jumanji:Snake-v1", 0, None),
    pytest.param("craftax:Craftax-Classic-Symbolic-v1", 1, None, marks=pytest.mark.extended),  # compiling: ~50 s
    # MuJoCo's renderer, after compiling the physics step: 10-15 s
    pytest.param("brax:inverted_pendulum", 0.2, 1, marks=pytest.mark.extended),
    pytest.param("playground:CartpoleBalance", 1.0, 1, marks=pytest.mark.extended),
]


@pytest.mark.slow
@pytest.mark.parametrize("env_id, action, size", SUITE_EPISODES)
def test_a_suite_env_is_drawn_by_its_own_renderer(env_id, action, size):
    pytest.importorskip(suites.SUITES[env_id.partition(":")[0]].package)
    frames, rewards = render.suite_player(env_id, constant(action, size))(jax.random.key(0), max_steps=3)
    assert len(frames) == 4 and rewards.shape == (3,)  # the reset state and one frame per step
    assert all(f.dtype == np.uint8 and f.ndim == 3 and f.shape == frames[0].shape for f in frames)
    assert frames[0].shape[-1] == 3 and frames[0].shape[1] >= render.CAPTION_WIDTH
    pictures = [f[40:] for f in frames]  # below the two-line caption
    assert all(not np.array_equal(a, b) for a, b in zip(pictures, pictures[1:], strict=False)), env_id
    assert pictures[0].std() > 0  # not a blank frame


@pytest.mark.parametrize("env_id", ["DeepSea-bsuite", "MyEnv-v0"])
def test_an_env_without_a_renderer_is_one_line(env_id):
    with pytest.raises(ValueError, match="no renderer; jaxrl render draws CartPole-v1.* navix:, craftax:") as e:
        render.check_renderable(env_id)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no renderer"):
        render.play(env_id, uniform(3), jax.random.key(0))


def run_folder(tmp_path):
    """A folder that reads as a run folder (its config.json), for a test that fakes the restore itself."""
    (tmp_path / "config.json").write_text(json.dumps({"algo": "ppo", "config": {}, "seeds": 1, "seed": 0}))
    return tmp_path


def test_cli_refuses_an_env_without_a_renderer_in_one_line(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from jaxrl import cli
    from jaxrl.run import evaluate

    config = SimpleNamespace(env="DeepSea-bsuite")
    monkeypatch.setattr(evaluate, "restore_latest", lambda run_dir: ({"algo": "ppo"}, None, config, 1, None))
    status = cli.main(["render", str(run_folder(tmp_path)), "--out", str(tmp_path / "episode.gif")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("jaxrl: error: DeepSea-bsuite: no renderer"), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "episode.gif").exists()


@pytest.mark.slow
def test_mujoco_suites_refuse_in_one_line_when_their_renderer_cannot_start(tmp_path, monkeypatch, capsys):
    pytest.importorskip("brax")
    mujoco = pytest.importorskip("mujoco")
    from types import SimpleNamespace

    from jaxrl import cli
    from jaxrl.run import evaluate

    render.check_renderable("brax:inverted_pendulum")  # MuJoCo draws here (conftest: MUJOCO_GL=egl)

    def no_gl(*args, **kwargs):
        raise mujoco.FatalError("an OpenGL platform library has not been loaded into this process")

    monkeypatch.setattr(mujoco, "Renderer", no_gl)
    with pytest.raises(ValueError, match="MuJoCo's renderer cannot start .*set MUJOCO_GL=egl .*osmesa") as e:
        render.check_renderable("brax:inverted_pendulum")
    assert "\n" not in str(e.value)
    config = SimpleNamespace(env="brax:inverted_pendulum")
    monkeypatch.setattr(evaluate, "restore_latest", lambda run_dir: ({"algo": "ppo"}, None, config, 1, None))
    status = cli.main(["render", str(run_folder(tmp_path)), "--out", str(tmp_path / "episode.gif")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("jaxrl: error: brax:inverted_pendulum: MuJoCo's renderer"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "episode.gif").exists()


def _hashes(folder):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.extended
def test_cli_renders_and_evaluates_a_trained_run_and_only_reads_it(tmp_path):
    run = tmp_path / "run"
    train = [sys.executable, "-m", "jaxrl.cli", "train", "ppo", "--total-timesteps", "4096", "--num-envs", "4"]
    train += ["--num-steps", "16", "--no-progress", "--run-dir", str(run)]
    subprocess.run(train, check=True, capture_output=True, timeout=900)
    before = _hashes(run)
    out = tmp_path / "episode.gif"
    command = [sys.executable, "-m", "jaxrl.cli", "render", str(run), "--out", str(out), "--episodes", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    lengths = [int(line.split()[2]) for line in done.stdout.splitlines() if line.startswith("episode ")]
    assert len(lengths) == 2
    with Image.open(out) as image:
        assert image.n_frames == sum(lengths) + 2  # each episode: its reset state and one frame per step
    assert out.with_suffix(".png").is_file()
    assert _hashes(run) == before
    evaluate = [sys.executable, "-m", "jaxrl.cli", "eval", str(run), "--episodes", "4"]
    evaluated = subprocess.run(evaluate, capture_output=True, text=True, timeout=900)
    assert evaluated.returncode == 0 and "4 episodes" in evaluated.stdout, evaluated.stderr
    modes = [line.split()[0] for line in evaluated.stdout.splitlines()[1:]]
    assert modes == ["deterministic", "stochastic"] and _hashes(run) == before
    bad = subprocess.run([*command[:5], "--out", str(tmp_path / "x.avi")], capture_output=True, text=True, timeout=900)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.extended
@pytest.mark.parametrize("env_id", ["playground:CartpoleBalance"])  # Brax's renderer: the 3-step episode test above
def test_cli_renders_a_mujoco_suite_run_through_its_renderer_and_only_reads_it(tmp_path, env_id):
    # compiling PPO on the physics, then the render's step: ~90 s (Playground)
    pytest.importorskip(suites.SUITES[env_id.partition(":")[0]].package)
    run = tmp_path / "run"
    train = [sys.executable, "-m", "jaxrl.cli", "train", "ppo", "--env", env_id, "--total-timesteps", "64"]
    train += ["--num-envs", "2", "--num-steps", "16", "--update-epochs", "1", "--num-minibatches", "1"]
    train += ["--no-progress", "--compile-cache", "none", "--run-dir", str(run)]
    subprocess.run(train, check=True, capture_output=True, timeout=900)
    before = _hashes(run)
    out = tmp_path / "episode.gif"
    command = [sys.executable, "-m", "jaxrl.cli", "render", str(run), "--out", str(out), "--max-steps", "12"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("episode ")]
    steps = int(line.split()[2])
    assert 1 <= steps <= 12 and (steps < 12 or "drawn up to --max-steps 12" in line), line
    with Image.open(out) as image:
        assert image.n_frames == steps + 1  # the reset state and one frame per step
        frames = []
        for t in range(image.n_frames):
            image.seek(t)
            frames.append(np.asarray(image.convert("RGB"))[40:])  # below the caption
    assert frames[0].shape[1] == render.MUJOCO_FRAME[1] and frames[0].std() > 0
    assert not np.array_equal(frames[0], frames[-1])  # the physics moved
    assert out.with_suffix(".png").is_file() and _hashes(run) == before
