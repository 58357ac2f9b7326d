"""The dialect's Lark grammar files, a package so that they ship inside the wheel."""
