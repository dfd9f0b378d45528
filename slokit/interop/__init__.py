"""SLO files from and to other tools: `slokit import` (Pyrra, Sloth, OpenSLO) and `slokit export openslo`.

Import reads each foreign SLO into a plain `Objective` record (or a `Notice` naming what slokit cannot express),
then one writer turns the records into slokit spec text. Export turns a loaded `Spec` into OpenSLO v1 documents.
"""
