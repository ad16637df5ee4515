"""CITATION.cff meets the Citation File Format 1.2.0 schema's required keys and types
(https://github.com/citation-file-format/citation-file-format/blob/1.2.0/schema.json: cff-version,
message, title, authors as persons or entities; the optional keys used here with their types), and
the README's BibTeX entry says what it says. cffconvert 2.0.0 would validate against the schema
itself, but would bring five packages into the dev extra for one file (click, requests,
ruamel.yaml, pykwalify, and jsonschema pinned below 4)."""

from __future__ import annotations

import datetime as dt
import re

import yaml

from tests.helpers.paths import ROOT

CFF = yaml.safe_load((ROOT / "CITATION.cff").read_text())
#: schema.json's definitions: a person has family-names/given-names/..., an entity a name
PERSON = {"family-names", "given-names", "name-particle", "name-suffix", "affiliation", "email"}
ENTITY = {"name", "address", "city", "country", "email", "website", "date-start", "date-end"}
URL = re.compile(r"^(https|http|ftp|sftp)://.+")


def test_the_required_keys_and_their_types():
    assert CFF["cff-version"] == "1.2.0"
    for key in ("message", "title"):
        assert isinstance(CFF[key], str) and CFF[key].strip(), key
    assert CFF.get("type", "software") in ("software", "dataset")
    authors = CFF["authors"]
    assert isinstance(authors, list) and authors, "authors: a non-empty list"
    for a in authors:
        assert isinstance(a, dict) and (set(a) <= PERSON | {"orcid"} or set(a) <= ENTITY), a
        assert a.get("name") or a.get("family-names"), a


def test_the_release_keys_a_citation_needs():
    """A version and a release date (an ISO date, as YAML reads it), a license, and a URL only
    where the project has one (none is public yet: no repository-code rather than a made-up one)."""
    assert isinstance(CFF["version"], str | int | float) and str(CFF["version"]), "version"
    assert isinstance(CFF["date-released"], dt.date), CFF.get("date-released")
    assert CFF["license"] == "MIT" and "MIT License" in (ROOT / "LICENSE").read_text()
    for key in ("repository-code", "url", "repository"):
        if key in CFF:
            assert URL.match(CFF[key]), (key, CFF[key])
    holder = re.search(r"Copyright \(c\) \d{4} (.+)", (ROOT / "LICENSE").read_text()).group(1)
    assert [a.get("name") for a in CFF["authors"]] == [holder.strip()], "authors vs LICENSE"


def test_the_readmes_bibtex_matches():
    readme = (ROOT / "README.md").read_text()
    entry = re.search(r"@software\{negmine,\n(.*?)\n\}", readme, re.S).group(1)
    fields = dict(re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?$", entry, re.M))
    assert fields["author"] == "{" + CFF["authors"][0]["name"] + "}"
    assert fields["title"] == CFF["title"]
    assert fields["version"] == str(CFF["version"])
    assert fields["year"] == str(CFF["date-released"].year)
    assert fields["date"] == CFF["date-released"].isoformat()
    assert fields["license"] == CFF["license"]
    assert fields.get("url") == CFF.get("repository-code", CFF.get("url"))
