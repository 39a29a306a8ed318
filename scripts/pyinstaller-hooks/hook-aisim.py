"""PyInstaller's hook for aisim (scripts/aisim.spec points PyInstaller at this folder).

The shipped scenarios and the calibration are package data. aisim's modules go in both compiled and as
source: pydantic reads the scenario models' attribute docstrings from the source (they are the JSON
Schema's descriptions, which `aisim schema` prints and editors show), and without the source a frozen
aisim would print a schema with none.
"""

from PyInstaller.utils.hooks import collect_data_files

datas = collect_data_files("aisim")
module_collection_mode = "pyz+py"
