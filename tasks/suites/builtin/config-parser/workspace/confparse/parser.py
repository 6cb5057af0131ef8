"""Lines to sections."""

from confparse.values import coerce


def parse(text):
    config = {"default": {}}
    section = "default"
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            config.setdefault(section, {})
            continue
        key, value = line.split("=")
        config[section][key.strip()] = coerce(value.strip())
    return config
