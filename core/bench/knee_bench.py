"""The generator's batch-size knee for `specscale profile-knee`: load, build the engine, measure.

The measurement itself is :func:`core.engine.knee.engine_knee` (whole curve, cached for solve's
``--speculation-budget auto``); this module only turns model settings into the engine it runs on.
"""

from __future__ import annotations


def profile_generator(settings, max_rows: int | None, context: int, min_gain: float, repeats: int,
                      on_point=None) -> tuple:
    """Load ``settings.generator`` and measure its knee on the engine ``settings`` describe.

    Args:
        settings: :class:`core.settings.ModelSettings`. max_rows: largest row count (None or above
            ``max_num_seqs``: ``max_num_seqs``). context / min_gain / repeats / on_point: see
            :func:`core.engine.knee.engine_knee`.

    Returns:
        ``(profile, dtype name, max rows measured, cache file)``: the :class:`~core.engine.knee.KneeProfile`.

    Raises:
        core.models.loader.ModelLoadError: the model cannot be loaded. ValueError: the engine cannot
            be built. RuntimeError: a profile step was not pure decode (an engine too small).
    """
    from core.engine.knee import cache_path, engine_knee, profile_key
    from core.models.loader import load_model
    from core.solver import build_engine

    generator = load_model(settings.generator, settings.dtype, settings.device)
    engine = build_engine(generator, settings, settings.gen_kv_bytes)
    rows = min(max_rows or engine.config.max_num_seqs, engine.config.max_num_seqs)
    profile = engine_knee(engine, max_rows=rows, context=context, min_gain=min_gain, repeats=repeats,
                          whole_curve=True, on_point=on_point)
    return profile, profile.key["dtype"], rows, cache_path(profile_key(engine), context)
