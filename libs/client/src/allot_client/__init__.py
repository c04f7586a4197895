"""allot_client: follow Allot's event log from a position, with filters; catch-up from PostgreSQL, live from NATS.

    async with AllotClient(database_url=..., nats_url=...) as client:
        async with client.follow(after=saved, types=["pod.placed"], namespaces=["team-a"]) as subscription:
            async for delivery in subscription:
                handle(delivery.event)
                save(delivery.position)

See docs/subscribe.md.
"""

from allot_client.client import AllotClient
from allot_client.filters import Filter, FilterError, Scope, scope_of
from allot_client.subscription import Delivery, Subscription, SubscriptionStats

__all__ = [
    "AllotClient",
    "Delivery",
    "Filter",
    "FilterError",
    "Scope",
    "Subscription",
    "SubscriptionStats",
    "scope_of",
]
