"""Start the LLM Inference Explorer in the browser: `python app.py [--model ID | --config PRESET]`.

`python app.py --help` lists the options.
"""

from explorer.ui.launch import main

if __name__ == "__main__":
    main()
