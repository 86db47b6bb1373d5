"""The words the semantic-hit guards read: number words, negators, opposites, units, languages, output
formats and function words. English only: a prompt in another language is judged by the embedding, the
script guard and the exact facts (numbers, codes, quoted text).

Written out here because no library that ships offline has what the guards need: WordNet's antonyms
come with a separate data download, and none lists units or output formats.
"""

from __future__ import annotations

# Number words that stand alone ("two", "zero"); larger ones are read by text2num.
SMALL = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
# Quantities in words that number parsers leave alone ("a dozen", "a pair of", "half").
QUANTITY_WORDS = {"dozen": 12, "half": 0.5, "quarter": 0.25, "twice": 2, "double": 2, "triple": 3}
# Words that deny what follows them, outright or by meaning ("in the absence of", "to avoid", "optional").
NEGATORS = frozenset("not no never none nobody nothing neither nor cannot without unless nowhere non absence absent "
                     "lack lacks lacking lacked prevent prevents prevented avoid avoids avoided except "
                     "optional".split())
ANTONYMS = [tuple(pair.split("/")) for pair in (
    "open/closed close/open opens/closes opening/closing before/after earlier/later early/late first/last "
    "increase/decrease increases/decreases raise/lower more/less most/least higher/lower high/low max/min "
    "maximum/minimum above/below buy/sell buying/selling add/remove adding/removing "
    "enable/disable enabled/disabled start/stop starts/stops true/false yes/no hot/cold warm/cool "
    "import/export upload/download encrypt/decrypt encode/decode compress/decompress "
    "push/pull win/lose won/lost accept/reject include/exclude included/excluded allow/deny allowed/denied "
    "left/right north/south east/west male/female men/women past/future long/short fast/slow big/small "
    "large/small plus/minus positive/negative cheap/expensive cheapest/dearest best/worst good/bad "
    "better/worse safe/unsafe legal/illegal possible/impossible love/hate agree/disagree "
    "arrive/depart arrival/departure deposit/withdraw debit/credit lend/borrow send/receive "
    "sent/received input/output inbound/outbound incoming/outgoing ascending/descending asc/desc "
    "minimum/maximum young/old younger/older newest/oldest light/dark day/night morning/evening "
    "summer/winter spring/autumn weekday/weekend today/tomorrow yesterday/tomorrow monday/tuesday "
    "wet/dry full/empty rich/poor success/failure pass/fail passed/failed valid/invalid legal/illegal "
    "synonym/antonym same/different similar/different odd/even prime/composite uppercase/lowercase "
    "upper/lower rise/fall rises/falls rising/falling up/down inside/outside local/remote public/private "
    "sync/async synchronous/asynchronous ascend/descend horizontal/vertical inner/outer internal/external "
    "client/server child/adult children/adults parent/child beginner/advanced "
    # States and their verbs: "show" / "hide hidden files", "pause" / "resume syncing".
    "show/hide showing/hiding shown/hidden pause/resume paused/resumed login/logout signin/signout "
    "enter/exit join/leave attach/detach expand/collapse maximize/minimize maximise/minimise begin/end "
    "forward/backward forwards/backwards ahead/behind front/back "
    # Comparisons and extremes.
    "more/fewer most/fewest greater/less greater/fewer highest/lowest earliest/latest bigger/smaller "
    "larger/smaller largest/smallest biggest/smallest longest/shortest longer/shorter faster/slower "
    "fastest/slowest newer/older top/bottom increase/reduce grow/shrink gain/lose heavier/lighter "
    "strongest/weakest stronger/weaker cheaper/dearer cheapest/priciest").split()]
# Small words that flip a meaning only where one stands in the other's place ("turn the wifi on" /
# "off", "log in to" / "log out of", "hotels under" / "over 150 euros", "a file to" / "from S3"): too
# common to be compared as present or absent, so the guard reads them where the two prompts differ.
PARTICLES = [tuple(pair.split("/")) for pair in (
    "on/off in/out up/down over/under above/below to/from into/from onto/from toward/from towards/from "
    "into/out").split()]
# Prefixes that turn a word into its opposite ("mute" / "unmute", "connect" / "disconnect"), with the
# shortest word each may prefix (so that "bug" / "debug" or "put" / "input" are no pair).
NEGATING_PREFIXES = {"un": 3, "dis": 4, "de": 4, "non": 4, "in": 5, "im": 5, "il": 5, "ir": 5, "anti": 4}
UNITS = {
    "kg": "kg", "kgs": "kg", "kilogram": "kg", "kilograms": "kg", "kilo": "kg", "kilos": "kg",
    "lb": "lb", "lbs": "lb", "pound": "lb", "pounds": "lb", "g": "g", "gram": "g", "grams": "g",
    "oz": "oz", "ounce": "oz", "ounces": "oz", "km": "km", "kilometer": "km", "kilometers": "km",
    "kilometre": "km", "kilometres": "km", "mile": "mi", "miles": "mi", "mi": "mi", "m": "m", "meter": "m",
    "meters": "m", "metre": "m", "metres": "m", "cm": "cm", "centimeter": "cm", "centimeters": "cm",
    "inch": "in", "inches": "in", "foot": "ft", "feet": "ft", "ft": "ft", "yard": "yd", "yards": "yd",
    "celsius": "C", "centigrade": "C", "fahrenheit": "F", "kelvin": "K", "liter": "l", "liters": "l",
    "litre": "l", "litres": "l", "gallon": "gal", "gallons": "gal", "ml": "ml", "cup": "cup", "cups": "cup",
    "second": "s", "seconds": "s", "minute": "min", "minutes": "min", "hour": "h", "hours": "h",
    "day": "d", "days": "d", "week": "wk", "weeks": "wk", "month": "mo", "months": "mo", "year": "y",
    "years": "y", "byte": "B", "bytes": "B", "kb": "kB", "mb": "MB", "gb": "GB", "tb": "TB",
    "usd": "USD", "dollar": "USD", "dollars": "USD", "eur": "EUR", "euro": "EUR", "euros": "EUR",
    "gbp": "GBP", "sterling": "GBP", "ngn": "NGN", "naira": "NGN", "kes": "KES", "shilling": "KES",
    "shillings": "KES", "zar": "ZAR", "rand": "ZAR", "jpy": "JPY", "yen": "JPY", "cedi": "GHS", "cedis": "GHS",
    "mph": "mph", "kph": "kph", "kmh": "kph",
}
# Units short enough to be something else alone ("g", "m"), read as units only right after a number.
SHORT_UNITS = frozenset(u for u in UNITS if len(u) <= 2)
LANGUAGES = frozenset(
    "english french spanish german portuguese italian dutch russian arabic chinese mandarin cantonese "
    "japanese korean hindi bengali urdu swahili yoruba hausa igbo amharic zulu xhosa afrikaans somali "
    "turkish persian farsi greek polish ukrainian czech swedish norwegian danish finnish hebrew thai "
    "vietnamese indonesian malay tagalog latin".split())
FORMATS = {
    "json": "json", "yaml": "yaml", "yml": "yaml", "xml": "xml", "csv": "csv", "tsv": "tsv", "table": "table",
    "tables": "table", "tabular": "table", "list": "list", "bullet": "list", "bullets": "list",
    "bulleted": "list", "numbered": "numbered", "markdown": "markdown", "html": "html", "latex": "latex",
    "code": "code", "python": "python", "javascript": "javascript", "typescript": "typescript", "java": "java",
    "sql": "sql", "bash": "bash", "shell": "bash", "rust": "rust", "go": "go", "golang": "go", "c": "c",
    "cpp": "cpp", "haiku": "haiku", "poem": "poem", "limerick": "limerick", "sonnet": "sonnet", "essay": "essay",
    "tweet": "tweet", "email": "email", "letter": "letter", "summary": "summary", "tldr": "summary",
    "paragraph": "paragraph", "paragraphs": "paragraph", "sentence": "sentence", "sentences": "sentence",
    "word": "word", "words": "word", "outline": "outline", "diagram": "diagram", "regex": "regex",
}

# Capitalised mid-sentence for grammar's sake, not because they name something.
COMMON = frozenset("i i'm i've i'd i'll a an the and or but if is are was what how why who when where which "
                    "can could would should will do does did please".split())

# Words that carry grammar rather than content: a prompt that changes only these asks the same thing.
FUNCTION = frozenset(
    "a an the this that these those it its it's is are was were be been being am do does did done have has "
    "had having i me my mine we us our you your yours he him his she her they them their there here what "
    "which who whom whose when where why how whether if then than so as at by for from in into of on onto "
    "to with about over under up out off again further once can could would should will shall may might "
    "must need please kindly just also too very really quite some any all each every both either more most "
    "such only own same other another and or but nor because while until tell show give let get "
    "i'm i've i'd i'll you're what's how's there's way ways".split())
# The items of a list or a comparison, where their order changes nothing ("tea or coffee").
SYMMETRIC = frozenset("and or vs versus".split())
