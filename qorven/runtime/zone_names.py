"""The time zone names a person can choose: the IANA names of the tz database as zoneinfo
lists them on this machine (canonical names and their aliases: 'Europe/Paris', 'UTC',
'US/Eastern'), less the files kept among them that name no zone anyone would pick. Every
name given for a workspace, a person, a beat or QORVEN_TIME_ZONE is checked against it; a
name saved before is still read as zoneinfo reads it (tenancy.zones)."""
from __future__ import annotations

from functools import cache
from zoneinfo import available_timezones

# Among the zones but none: 'localtime' is a link to this server's own clock setting (it
# moves when the server's does), 'Factory' is tzdata's "zone not set yet", 'posixrules'
# the default rule file. posix/ and right/ hold copies of every zone (right/ counting
# leap seconds, which no clock shows).
NOT_ZONES = frozenset({"localtime", "Factory", "posixrules"})
NOT_ZONE_FOLDERS = ("posix/", "right/")


@cache
def zones_choosable() -> frozenset[str]:
    """Every name a person can choose (read once: the tz database changes with an upgrade,
    and a restart follows one)."""
    return frozenset(name for name in available_timezones()
                     if name not in NOT_ZONES and not name.startswith(NOT_ZONE_FOLDERS))


def zone_choosable(name: str) -> bool:
    """Whether `name` is a zone a person can choose, spelled exactly as the tz database does."""
    return name in zones_choosable()
