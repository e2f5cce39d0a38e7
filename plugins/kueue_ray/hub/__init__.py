"""The triggerer's watch hub: one list+watch per (connection, namespace, resource), shared by all triggers.

A triggerer runs up to a thousand deferred tasks in one asyncio loop. If every RayJobTrigger polled or
watched on its own, the API server would see one request stream per waiting task and the triggerer would
spend its loop on TLS handshakes (apache/airflow#71349 reports that of polling Kubernetes triggers). Instead, every trigger of a process
subscribes here with its RayJob name and uid; the hub runs exactly one watch for the namespace's RayJobs
created by this project and one for its Kueue Workloads, keeps what they return in memory (like a
client-go informer) and hands changes to the subscribers through their own asyncio queues.

What waiting costs is therefore per namespace, not per trigger, and grows with state transitions, not
with time:

* A subscriber starts from the cache once the loop has listed (a burst of triggers starting together waits
  for that one LIST, however slow, up to ``first_list_budget_seconds``); only a RayJob missing from the
  cache costs a GET, one per name in flight however many subscribers ask (``kueue_ray.hub.reads``).
* The safety net against a missed event is one relist per loop every ``resync_interval`` (the shortest of
  the namespace's subscribers, jittered), not a re-read per trigger: the relist refreshes the cache for
  every subscriber at once, and anything that changed or vanished is delivered.
* Queue positions come from one visibility read per LocalQueue, shared by every trigger that asks within
  a few seconds (``Subscription.pending_positions``), so a thousand queued triggers cost one request.

Robustness: each loop is a ``kueue_ray.kube.listwatch.ListWatchLoop`` (the one the Kueue UI's cache runs too):
watches resume from the last resourceVersion, relist on 410 Gone, back off with jitter, and read a watch
answered with anything but 200 as the refusal it is (401 loads the credentials again, 429 waits for
``Retry-After``, a 403 to the watch alone turns the loop into one list per ``degraded_list_interval``).
While a loop polls, every waiting task is told so in its log, with the ``kubectl auth can-i`` check that
shows what is missing. While a loop fails (5xx, 429, dropped connections, timeouts, 401/403), its
subscribers read nothing themselves: they wait on its next outcome, so an outage costs the loop's retries
per resource, not a retry per waiting task, and delays a trigger but never ends it. A 401/403 in a row to a loop's list or watch, or to a subscriber's read, for ``refusal_timeout``
(``HubSettings``; ``[kueue_ray] refusal_timeout``) ends every wait that needs it, and so does a 404 that
discovery confirms is an API group the cluster does not serve (``Subscription.access``). The (connection, namespace) has one ApiClient (``SharedApiClient``), lent to its watch loops and
to every read. Objects only replace cached ones with a higher resourceVersion, so a slow GET cannot roll
state back. The loops for a (connection, namespace) start with its first subscription and stop with its
last, so an idle triggerer holds no connection open.

Module-level ``HUB`` is the process-wide instance: every trigger of a triggerer runs in the same process
and event loop, so they share module state. It is a cache only: the truth stays in the API server.

The package, by layer: ``resources`` says what is watched (API coordinates, selectors, keys),
``settings`` its tunables, ``subscriptions`` is what a trigger holds (its ``Subscription`` and
``Mailbox``), ``reads`` how a read joins one in flight, ``scope`` is the state kept per (connection,
namespace) with its watch loops, and ``watchhub`` is the ``WatchHub`` that ties them together: it caches
what the loops offer and delivers it to subscribers. This module names what the triggers use; the rest is imported from its submodule.
"""

from __future__ import annotations

from kueue_ray.hub.settings import HubSettings
from kueue_ray.hub.subscriptions import ADMITTED, NOTICE, QUEUED, Subscription, Update
from kueue_ray.hub.watchhub import HUB, WatchHub

__all__ = ["ADMITTED", "HUB", "NOTICE", "QUEUED", "HubSettings", "Subscription", "Update", "WatchHub"]
