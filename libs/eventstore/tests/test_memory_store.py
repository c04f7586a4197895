import pytest

from allot_eventstore import InMemoryEventStore
from allot_testing.contracts.store import EventStoreContract


class TestInMemoryStore(EventStoreContract):
    @pytest.fixture
    def store(self):
        return InMemoryEventStore()
