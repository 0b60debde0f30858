"""Orbital islands: where the satellites are and when each link is up (what a run does with it, on its hook
points, is ``train/orbit.py``).

  geometry.py    closed forms on numbers (Kepler, the mask's central angle, the shadow, line of sight) and the
                 window finder; the interface every orbit model gives (``OrbitSource``)
  config.py      link.orbit.* (``OrbitConfig``, ``StationConfig``): torch-free, a section of the experiment config
  tle.py         two-line element sets as text: where they are, a format check (no propagator needed)
  circular.py    the analytic model: N satellites in one circular orbit (the default, and the teaching version)
  sgp4_orbit.py  real orbits: element sets propagated by SGP4 (the optional ``orbit`` extra)
  windows.py     schedules: each link's contact windows, relaying over inter-satellite links, eclipses, the plan
                 the link model reads (``comm/link/contact.py``)
  settings.py    the orbital experiment's islands, time compression and controls (the experiment table's row)
  report.py      a study row in the design's units: days of orbit, bytes, days to the ground baseline's quality

Imports point one way: geometry <- config <- circular, sgp4_orbit <- windows (<- comm/link <- train/orbit.py). The
package sits below ``islands_kit.config`` and imports nothing of it (only ``rules.py`` and ``stats.py``, below both): the config reads
``config.py`` (``link.orbit``) and ``settings.py`` (the experiment table's row), never the other way round.
"""
