"""schemathesis hooks for .ci/api-check.

A watch (GET …/jobs/{job}?watch=true) streams until the job completes, and with no
FrameworkController behind the test API server nothing completes: a generated watch
with no bound, or a valid bound longer than a second, is bounded to timeoutSeconds=1
(the API's own bound on a watch), so it ends as the API says. Invalid bounds are left
as generated: the server must refuse them. A task log's `follow=true` waits for the task
to start and then follows it to its end, which nothing there makes happen either: it is
asked without `follow` (its bound is the caller's; the API has none to give it).
"""

import schemathesis


def _bounded(query):
    if str(query.get("follow", "")).lower() in ("true", "1"):
        query = {**query, "follow": "false"}
    if str(query.get("watch", "")).lower() not in ("true", "1"):
        return query
    bound = query.get("timeoutSeconds")
    try:
        valid_and_long = 1 < int(bound) <= 86400
    except (TypeError, ValueError):
        valid_and_long = False
    if bound is None or valid_and_long:
        return {**query, "timeoutSeconds": 1}
    return query


@schemathesis.hook
def map_case(context, case):
    if case.query:
        case.query = _bounded(case.query)
    return case
