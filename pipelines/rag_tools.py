"""Retrieval for pipelines/rag.sbp: a small corpus about the (invented) Vellmar Islands, searched by word overlap.

Pure Python, no network, no index to build: the corpus is written here, so a model cannot know its facts
without retrieving them. rag.sbp's `function search = "rag_tools:search"` finds this file beside the pipeline.
"""

from __future__ import annotations

import math
import re
from collections import Counter

CORPUS = {
    "Orvane": "Orvane is the largest of the Vellmar Islands. Its capital is the port town of Kesh, and it hosts "
    "the Saltglass Festival every spring, when glassmakers melt beach sand into lanterns.",
    "Kesh": "Kesh, the capital of Orvane, was founded by the navigator Ilsa Marrow in 1412. Its harbour has "
    "seven stone piers and a lighthouse called the Long Eye.",
    "Ilsa Marrow": "Ilsa Marrow was a navigator who charted the Vellmar Islands and founded the town of Kesh. "
    "Her ship was named the Patient Gull.",
    "Tamsin Isle": "Tamsin Isle is the smallest inhabited Vellmar island, with about 300 residents. Its only "
    "village is Brightwater, known for blue cheese aged in sea caves.",
    "Brightwater": "Brightwater is the only village on Tamsin Isle. Its cheesemakers age wheels of blue cheese "
    "in the Drowned Caves for nine months.",
    "Drowned Caves": "The Drowned Caves lie under the cliffs of Tamsin Isle; at high tide the sea fills their "
    "lower chambers, which keeps them cool all year.",
    "Hollin": "Hollin is the mountainous Vellmar island. Its highest peak, Mount Corvel, rises 2,140 metres, "
    "and its slopes are covered in juniper forest.",
    "Mount Corvel": "Mount Corvel, on Hollin, is the highest mountain of the Vellmar Islands at 2,140 metres. "
    "It was first climbed by Odo Fenn in 1788.",
    "Odo Fenn": "Odo Fenn was a surveyor from Kesh who made the first ascent of Mount Corvel in 1788 and "
    "drew the first map of Hollin's valleys.",
    "Vellmar ferries": "Ferries link the Vellmar Islands: the Gull Line sails between Kesh and Hollin daily, "
    "and a weekly boat called the Tern serves Tamsin Isle.",
    "Vellmar currency": "The Vellmar Islands use the mark, divided into 40 pennies. Coins show a gull on one "
    "side and a lantern on the other.",
    "Saltglass Festival": "The Saltglass Festival is held each spring in Orvane. Glassmakers fire lanterns from "
    "beach sand, and the brightest lantern wins the Amber Prize.",
    "Amber Prize": "The Amber Prize is awarded at the Saltglass Festival to the glassmaker whose lantern shines "
    "brightest. The prize is a cask of juniper spirit from Hollin.",
    "Juniper spirit": "Juniper spirit is distilled on Hollin from the berries of its mountain forests. The "
    "oldest distillery, Greyhollow, opened in 1650.",
    "Greyhollow": "Greyhollow is the oldest distillery on Hollin, opened in 1650 beside the river Sarn. It "
    "still ages its spirit in oak casks.",
    "River Sarn": "The river Sarn is the longest river of the Vellmar Islands, running 58 kilometres from "
    "Mount Corvel to the sea on Hollin's eastern coast.",
    "Vellmar parliament": "The Vellmar parliament, the Moot, meets in Kesh. It has 31 members, elected every "
    "five years from the three islands.",
    "Long Eye": "The Long Eye is the lighthouse of Kesh harbour. Built in 1603, its lamp can be seen 40 "
    "kilometres out to sea.",
    "Patient Gull": "The Patient Gull was Ilsa Marrow's ship. A copy of it stands in the square of Kesh, "
    "carved from Hollin oak.",
    "Vellmar language": "Most islanders speak Vellish, a language close to old coastal Norse; street signs in "
    "Kesh are written in Vellish and English.",
    "Grey seals": "Grey seals breed on the rocks around Tamsin Isle each autumn; around 900 pups are born "
    "there every year.",
    "Vellmar climate": "The Vellmar Islands have mild, wet winters and cool summers. Hollin gets the most rain, "
    "about 1,900 millimetres a year.",
}

WORD = re.compile(r"[a-z0-9]+")
STOP = frozenset("a an and at by for from in is it of on or the to was what which who how many when where its".split())


def words(text: str) -> list[str]:
    return [w for w in WORD.findall(text.lower()) if w not in STOP]


_DOCS = {title: Counter(words(f"{title} {text}")) for title, text in CORPUS.items()}
_IDF = {w: math.log(len(_DOCS) / sum(w in d for d in _DOCS.values())) + 1 for d in _DOCS.values() for w in d}


def search(query: str) -> str:
    """Return the three passages of the Vellmar Islands corpus that share the most (rare) words with the query,
    best first, one `Title: text` line each ("no passage found" when none does). Only the query's words count:
    a query naming the place, person or thing asked about finds it; a vague one finds little."""
    asked = set(words(query))
    scored = sorted(
        ((sum(_IDF[w] for w in asked if w in counts), title) for title, counts in _DOCS.items()),
        key=lambda pair: (-pair[0], pair[1]),
    )
    found = [f"{title}: {CORPUS[title]}" for score, title in scored[:3] if score > 0]
    return "\n".join(found) or "no passage found"
