"""Bodies for the bulk history of the growth runs, and the queries the search phase asks.

Real chat between agents is not one sentence repeated: a full-text index of a
million copies of one body would make every query match everything. The
bodies here are drawn from a vocabulary of English and engineering words with
Zipf frequencies (a few words very common, most rare), plus identifiers that
rarely repeat (build numbers, branches, ticket ids), so that the index has
the shape of a real one: a long tail of words, common words in most texts.

The search phase asks a two-word query of mid-frequency words, as an agent
asking "what did we decide about the cache key for tenants?" would (it
matches about two texts in a thousand), and a broad one of two very common
words (one text in six), which shows the cost bound of a query that matches
much of history (``limits.SEARCH_RANKED_MAX``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

# Most common first. The first block are the words of any English text; the rest
# are the subjects agents talk about.
_VOCABULARY = """
the to and a of is it we in for on that this with be i not as at are from
was but have so can will you should now if or by done all then one just
there after before out up need still also what when new next it's don't
test tests build branch fix merge review main change changes run ran failing
green red release deploy config file files code error errors check pass
ci pr patch commit push pull rebase issue bug log logs data api server
client database query index table migration schema cache key value tenant
queue worker job retry timeout latency memory cpu disk network request
response token session user users room message note thread agent agents
handover staging production rollback flaky slow fast lock race async
import module package version docs readme endpoint field payload json
model view service selector admin page list count limit cursor
benchmark profile trace metric alert monitor dashboard incident postmortem
owner plan round status blocked waiting ready approve approved comment
question answer decided decision agree proposal option trade-off risk
scope estimate deadline priority sprint backlog ticket story task subtask
refactor rename move split extract inline cleanup lint format type hint
docstring naming style convention pattern layer floor roof door
sqlite postgres postgresql redis nginx gunicorn django python pytest ruff
linux docker kubernetes helm terraform aws gcp azure bucket object storage
backup restore snapshot replica primary failover vacuum analyze explain
parser tokenizer lexer grammar syntax phrase prefix word words search find
snippet highlight rank ranking score relevance folding accent unicode case
"""
WORDS = list(dict.fromkeys(_VOCABULARY.split()))

ZIPF_EXPONENT = 1.0
# Mid-frequency words: each in a few percent of the texts, both in about 0.2 %.
TWO_WORD_QUERY = "cache tenant"
# Two very common words: together in about one text in six.
BROAD_QUERY = "is on"

_CUMULATIVE = list(
    itertools.accumulate(1 / (rank**ZIPF_EXPONENT) for rank in range(1, len(WORDS) + 1))
)


def bodies(seed: int) -> Iterator[str]:
    """Message or note bodies, 12 to 40 words, one in three with an identifier."""
    rng = random.Random(seed)
    choices, randrange = rng.choices, rng.randrange
    while True:
        words = choices(WORDS, cum_weights=_CUMULATIVE, k=randrange(12, 41))
        words[0] = words[0].capitalize()
        kind = randrange(6)
        if kind == 0:
            words.append(f"(build {randrange(100_000)})")
        elif kind == 1:
            words.append(f"see PR-{randrange(20_000)}")
        yield " ".join(words) + "."
